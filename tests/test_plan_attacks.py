"""The planner with attacks: shared trainings, own trainings, dropped (cell, attack) pairs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.attacks import ATTACKS


def test_inference_attacks_share_a_training_and_training_time_ones_get_their_own(
    tmp_path: Path,
) -> None:
    space = tmp_path / "a.yaml"
    space.write_text(
        "name: a\nbase: {epochs: 2}\n"
        "grid: {dataset: [digits, breast_cancer], seed: [0, 1]}\n"
        "attacks: [dli, ns, amc, {name: bli, params: {steps: 50}}]\n"
    )
    plan = expand(load_space(str(space)))
    assert ATTACKS.get("amc").info.training_time and ATTACKS.get("ns").info.binary_only
    # per cell: one shared training (+ amc's own); ns is dropped on 10-class digits
    assert len(plan.trainings) == 4 * 2
    shared = [t for t in plan.trainings if t.spec.train_attack == "none"]
    own = [t for t in plan.trainings if t.spec.train_attack == "amc"]
    assert len(shared) == len(own) == 4
    for t in shared:
        names = [a[0] for a in t.attacks]
        expected = ["dli", "ns", "bli"] if t.spec.dataset == "breast_cancer" else ["dli", "bli"]
        assert names == expected
    assert plan.n_evaluations == 2 * 3 + 2 * 2 + 4
    assert len(plan.dropped) == 2
    assert all(d.cell["attack"] == "ns" and "binary-only" in d.reason for d in plan.dropped)
    assert {t.trial_id for t in shared}.isdisjoint(t.spec.config_hash for t in shared)


def test_shipped_attacks_space_plans(tmp_path: Path) -> None:
    plan = expand(load_space("attacks"))
    assert plan.summary()["trainings"] == 12 * 3  # clean + AMC + LRB per cell
    assert len(plan.dropped) == 6 * 2  # NS and DS on the six digits cells


def test_summary_gives_a_training_time_attack_the_mp_of_its_own_trainings(
    tmp_path: Path,
) -> None:
    """AMC's trainings carry no clean row: the end-of-run summary quotes their own MP."""
    from sweep_engine.progress import grid_lines

    space = tmp_path / "s.yaml"
    space.write_text(
        "name: s\nbase: {epochs: 2, dataset: digits}\n"
        "grid: {seed: [0, 1]}\nattacks: [dli, amc]\n"
        "defenses: {gdp: [0.01]}\n"
    )
    plan = expand(load_space(str(space)))
    rows = []
    for t in plan.trainings:
        own = t.spec.train_attack
        mp = 0.5 if own == "amc" else 0.9
        if own == "none":
            rows.append({"trial_id": t.trial_id, "status": "ok", "attack": "none",
                         "defense": t.spec.defense, "mp": mp, "ap": None,
                         "ap_advantage": None})  # fmt: skip
        for name in [a[0] for a in t.attacks] + ([own] if own != "none" else []):
            rows.append({"trial_id": t.trial_id, "status": "ok", "attack": name,
                         "defense": t.spec.defense, "mp": mp, "ap": 0.3,
                         "ap_advantage": 0.1})  # fmt: skip
    lines = grid_lines(plan, rows)  # one scenario, named by its dataset
    amc = next(line for line in lines if line.startswith("digits: lowest mean advantage of amc"))
    dli = next(line for line in lines if line.startswith("digits: lowest mean advantage of dli"))
    assert amc.endswith("its MP 0.5000)") and dli.endswith("its MP 0.9000)"), lines


def test_dropped_cells_print_one_line_per_reason_and_a_lost_comparison_arm_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 63: NS on 10-class digits is dropped once per seed and defense; the plan says
    it once, with the count. 40 parties cannot split breast_cancer's 30 columns: every such
    cell is dropped, and the comparison that needed them is said to be lost."""
    from sweep_engine.cli import main

    space = tmp_path / "arms.yaml"
    space.write_text(
        "name: arms\nbase: {epochs: 1}\n"
        "grid: {dataset: [breast_cancer, digits], seed: [0, 1, 2], n_parties: [2, 40]}\n"
        "defenses: {gdp: [0.1, 1.0]}\nattacks: [ns]\n"
        "analysis: {compare: [n_parties=2:40]}\n"
        "resources: {cpu_per_party: 0.01, cpu_per_trial: 0}\n"
    )
    assert main(["--space", str(space), "--dry-run", "--results", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("    - ")]
    assert len(lines) == 3, captured.out  # NS on digits; 40 parties on each dataset
    (ns,) = [line for line in lines if "binary-only" in line]
    assert ns.startswith(
        "    - 9 cells (dataset=digits n_parties=2 defense=none attack=ns, "
        "dataset=digits n_parties=2 defense=gdp@0.1 attack=ns, "
        "dataset=digits n_parties=2 defense=gdp@1 attack=ns): attack 'ns' is binary-only"
    ), lines
    assert "analysis.compare n_parties=2:40: every cell with n_parties=40 was dropped" in (
        captured.err
    )


def test_the_plan_counts_the_attack_records_a_kind_writes(tmp_path: Path) -> None:
    """Issue 63: under FedHSSL an MC writes two records (``mc_pretrained`` and ``mc``); the
    plan's "attack evaluations" counts them as the records will, not one per attack."""
    space = tmp_path / "hsslmc.yaml"
    space.write_text(
        "name: hsslmc\nbase: {dataset: digits, aligned_ratio: 0.3, n_labeled: 100}\n"
        "grid: {ssl_variant: [splitnn, hssl_simsiam], seed: [0, 1]}\nattacks: [mc, pmc]\n"
    )
    plan = expand(load_space(str(space)))
    assert plan.summary()["trainings"] == 4
    assert plan.summary()["evaluations"] == 4 * 3  # mc_pretrained, mc, pmc
