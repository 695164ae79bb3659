"""Golden records: the NN engine's numbers, saved before the "one engine" refactor.

Why: that refactor moves every neural trial kind under one Protocol loop; its promise is
that plain NN trials do not change. ``tests/golden/*.json`` hold ``mp``, ``ap``,
``rounds`` and ``comm_bytes`` of every training of ``search_spaces/smoke.yaml`` and of a
defended (G-DP), attacked (DLI, PMC, BLI) digits trial, written at commit 8a4b6b9; this
test re-runs the same specs and requires equal numbers. MP and AP are ratios of counts,
rounds and bytes integers, so equality is exact, not a tolerance.

Regenerate only on purpose (a change that is meant to move the numbers, said in its
commit): ``VFLSWEEP_WRITE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_records.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import run_trial

GOLDEN = Path(__file__).parent / "golden"
FIELDS = ("attack", "attacker_party", "mp", "ap", "rounds", "comm_bytes")
DIGITS = TrialSpec.build(dataset="digits", epochs=10, seed=1, defense="gdp", defense_param=0.01)
DIGITS_ATTACKS: list[tuple[str, dict[str, Any]]] = [
    ("dli", {}),
    ("pmc", {"preset": "fast", "epochs": 2}),
    ("bli", {}),
]


def rows(records: list[Record]) -> list[dict[str, Any]]:
    return [{k: getattr(r, k) for k in FIELDS} for r in records]


def smoke_rows() -> dict[str, list[dict[str, Any]]]:
    """Every training of the demo space, in-process (the transports agree: test_determinism)."""
    plan = expand(load_space("smoke"))
    return {t.trial_id: rows(run_trial(t.spec, attacks=t.attacks)) for t in plan.trainings}


def digits_rows() -> dict[str, list[dict[str, Any]]]:
    return {DIGITS.config_hash: rows(run_trial(DIGITS, attacks=DIGITS_ATTACKS))}


def check(name: str, got: dict[str, list[dict[str, Any]]]) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("VFLSWEEP_WRITE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    assert sorted(got) == sorted(want), "the specs changed: their config hashes differ"
    for key, expected in want.items():
        assert got[key] == expected, key


def test_smoke_space_records_equal_the_golden_file() -> None:
    check("smoke", smoke_rows())


def test_defended_attacked_digits_trial_equals_the_golden_file() -> None:
    got = digits_rows()
    (records,) = got.values()
    assert [r["attack"] for r in records] == ["none", "dli", "pmc", "bli"]
    assert all(r["ap"] is not None for r in records[1:])
    check("digits_gdp_attacked", got)


@pytest.mark.skipif(bool(os.environ.get("VFLSWEEP_WRITE_GOLDEN")), reason="writing goldens")
def test_the_golden_comparison_can_fail() -> None:
    """Another seed gives other numbers, so equality above is a real check."""
    other = DIGITS.model_copy(update={"seed": 2})
    assert rows(run_trial(other, attacks=DIGITS_ATTACKS)) != next(iter(digits_rows().values()))
