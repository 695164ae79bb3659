"""``python sweep.py --space search_spaces/smoke.yaml``: the front door (see README)."""

import sys

from sweep_engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
