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


def test_building_a_clean_record_loads_no_torch_either() -> None:
    """``Record.trained`` (its MP's sampling error included, ``trainables/sampling.py``)
    runs without torch: a reader or a tree trial building records loads none."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from trainables.records import Record\n"
        "from trainables.rounds import TrainResult\n"
        "from trainables.spec import TrialSpec\n"
        "rec = Record.trained(TrialSpec.build(dataset='breast_cancer'), 100,\n"
        "                     TrainResult(mp=0.9), y_test=np.zeros(50, int))\n"
        "assert rec.mp_se is not None and rec.mp_se > 0, rec.mp_se\n"
        "print(','.join(m for m in ('torch', 'trainables.attacks') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
