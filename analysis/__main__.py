"""``python -m analysis <sweep dir>`` (see analysis/cli.py)."""

import sys

from analysis.cli import main

sys.exit(main())
