"""Readers of records never pay for torch: ``trainables.records`` (the schema and the
``Record`` dataclass the sink and the analysis use) imports no torch, Ray or the attacks
package at import time. Run in a fresh interpreter: the suite's own has torch loaded."""

from __future__ import annotations

import subprocess
import sys


def test_records_import_loads_no_torch_ray_or_attacks() -> None:
    code = (
        "import sys, trainables.records, trainables.results.manifest\n"
        "heavy = sorted(m for m in ('torch', 'ray', 'trainables.attacks') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
