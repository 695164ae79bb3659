"""The driver keeps no per-training data in Tune: its memory stays flat over many trainings.

Tune keeps every trial it ran to the end of the run: its config, its last result, its
newest checkpoints' metrics and a JSON snapshot of each. So what the driver passes
through Tune per trial must not grow with the trainings a trial (a pack) runs: the
config names the pack (its specs travel in the object store), and a report carries the key
of its records in the run's inbox (``sweep_engine/inbox.py``), never the records.
``benchmarks.sweep_cluster`` measures the RSS; these tests hold the structures that made it
grow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweep_engine.grid import pack_config, pack_text
from sweep_engine.inbox import Inbox
from sweep_engine.packs import make_packs
from sweep_engine.plan import expand
from sweep_engine.runner import COMPACT_AT, Progress
from sweep_engine.sink import CACHE_ROWS, RecordSink
from sweep_engine.space import load_space
from trainables.records import Record
from trainables.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[1]


def _plan(tmp_path: Path, seeds: int, pack: int | str = "auto", name: str = "many") -> Any:
    space = tmp_path / f"{name}.yaml"
    space.write_text(
        f"name: {name}\nbase: {{dataset: breast_cancer, epochs: 1}}\n"
        f"grid: {{seed: {list(range(seeds))}}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        f"run: {{pack: {pack}}}\n"
    )
    return space


def test_a_packs_tune_config_does_not_grow_with_its_trainings(tmp_path: Path) -> None:
    plan = expand(load_space(str(_plan(tmp_path, 400))))
    one, big = (
        make_packs(plan.trainings[:1], 1, 1, 5.0)[0],
        make_packs(plan.trainings, 400, 1, 5.0)[0],
    )
    assert len(big.trainings) == 400
    small, large = json.dumps(pack_config(one)), json.dumps(pack_config(big))
    assert abs(len(large) - len(small)) <= 8, (small, large)  # the id's "+399" only
    assert plan.trainings[0].spec.dataset not in large  # no spec rides in the config
    assert len(pack_text(big)) > 100 * len(large)  # the specs travel beside it


class _Trial:
    """What ``Progress`` reads of a Tune trial: its config."""

    def __init__(self, pack_id: str) -> None:
        self.config = {"cell": {"pack_id": pack_id, "n_parties": "2"}}


def _report(inbox: Inbox, specs: list[TrialSpec], sweep: str) -> dict[str, Any]:
    """What a pack reports of these trainings (``pack_trial._report``): their records
    posted to the inbox, its key in the result."""
    batch = []
    for spec in specs:
        record = Record.clean(
            spec, 0, mp=0.9, rounds=3, comm_bytes=10, train_seconds=0.01, sweep=sweep,
            trial_id=spec.config_hash,
        )  # fmt: skip
        batch.append((spec.config_hash, [record]))
    return {"records_key": inbox.post(batch), "n_reported": len(batch)}


def test_progress_keeps_no_records_in_what_tune_keeps(tmp_path: Path, ray_session: None) -> None:
    """2,500 trainings in reports of 5: every record written once; what Tune keeps of each
    result (its last result per trial) is a key, not records; the inbox is left empty; the
    sink's cache of rows for compaction stays below ``COMPACT_AT`` trainings."""
    specs = [TrialSpec.build(dataset="breast_cancer", epochs=1, seed=s) for s in range(2500)]
    sink, inbox = RecordSink(tmp_path / "many"), Inbox()
    progress = Progress(sink, inbox, len(specs))
    kept: dict[str, dict[str, Any]] = {}  # Tune's last_result per trial
    cache_peak = 0
    for start in range(0, len(specs), 5):
        trial = _Trial(f"pack{start // 100}")
        result = _report(inbox, specs[start : start + 5], "many")
        progress.on_trial_result(0, [], trial, result)
        kept[trial.config["cell"]["pack_id"]] = result
        cache_peak = max(cache_peak, len(sink._written))
    # a retried pack reports trainings again: written once, counted as repeats
    progress.on_trial_result(0, [], _Trial("pack0"), _report(inbox, specs[:5], "many"))
    assert progress.repeats == 5
    assert len(progress.written) == len(specs)
    ids = sink.read().column("trial_id").to_pylist()
    assert len(ids) == len(set(ids)) == len(specs)
    assert max(len(json.dumps(r)) for r in kept.values()) < 200  # a record is ~2 KB
    assert cache_peak < COMPACT_AT <= CACHE_ROWS
    assert inbox.rest() == []  # every batch taken when its key was reported


def test_a_batch_posted_by_a_trial_that_died_before_its_report_is_written_at_the_end(
    tmp_path: Path, ray_session: None
) -> None:
    """A trial that posted a batch, then died before its report: the batch is still in the
    inbox, and ``take_rest`` (after Tune ends) writes it; taken twice, it is written once."""
    specs = [TrialSpec.build(dataset="breast_cancer", epochs=1, seed=s) for s in range(4)]
    sink, inbox = RecordSink(tmp_path / "died"), Inbox()
    progress = Progress(sink, inbox, len(specs))
    progress.on_trial_result(0, [], _Trial("pack0"), _report(inbox, specs[:2], "died"))
    _report(inbox, specs[2:], "died")  # posted; no report followed
    _report(Inbox(), specs[3:], "other")  # another run's inbox: not this run's to take
    assert len(progress.written) == 2
    progress.take_rest()
    assert sorted(progress.written) == sorted(s.config_hash for s in specs)
    assert inbox.rest() == [] and progress.repeats == 0
    assert sorted(sink.read().column("trial_id").to_pylist()) == sorted(progress.written)


def test_a_batch_posted_twice_before_no_report_is_written_once(
    tmp_path: Path, ray_session: None
) -> None:
    """A trial whose report Tune refused after the inbox took its batch (a Ctrl-C), and
    that posted the same trainings again in its last report: ``take_rest`` finds them
    twice in one batch and writes each once (it raised "a training appears twice")."""
    specs = [TrialSpec.build(dataset="breast_cancer", epochs=1, seed=s) for s in range(3)]
    sink, inbox = RecordSink(tmp_path / "twice"), Inbox()
    progress = Progress(sink, inbox, len(specs))
    _report(inbox, specs, "twice")
    _report(inbox, specs[1:], "twice")
    progress.take_rest()
    assert sorted(progress.written) == sorted(s.config_hash for s in specs)
    assert progress.repeats == 2 and inbox.rest() == []
    assert sorted(sink.read().column("trial_id").to_pylist()) == sorted(progress.written)


def test_tune_keeps_as_much_of_a_big_pack_as_of_a_small_one(tmp_path: Path) -> None:
    """A real grid on Ray: packs of 20 and of 2 trainings leave Tune trial states (its
    experiment snapshot, which holds what the driver keeps of each trial) of one size."""
    space = _plan(tmp_path, 22, pack=20, name="two")
    results = tmp_path / "results"
    cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
    cmd += ["--no-mlflow", "--num-cpus", "2"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = RecordSink(results / "two").read().column("trial_id").to_pylist()
    assert len(ids) == len(set(ids)) == 22
    (state,) = (results / "two" / "_tune").glob("*/experiment_state-*.json")
    trials = json.loads(state.read_text())["trial_data"]
    sizes = {}
    for trial_json, runtime_json in trials:
        pack_id = json.loads(trial_json)["config"]["cell"]["pack_id"]
        sizes[pack_id] = len(trial_json) + len(runtime_json)
    assert sorted(int(k.partition("+")[2] or 0) for k in sizes) == [1, 19], sizes
    assert max(sizes.values()) - min(sizes.values()) < 2000, sizes


def test_memtrace_writes_a_checkpoint_per_n_trainings(tmp_path: Path) -> None:
    """In a fresh interpreter, as a driver has it: in this one (torch, Ray, MLflow loaded)
    each checkpoint's walk over every live object took ~10 s."""
    out = tmp_path / "trace.jsonl"
    code = (
        "import sys, tracemalloc\n"
        "from sweep_engine.memtrace import MemTrace\n"
        "trace = MemTrace(sys.argv[1], every=100)\n"
        "kept = []\n"
        "for done in (50, 120, 150, 260, 299, 300):\n"
        "    kept.append(bytearray(200_000))  # something to grow between checkpoints\n"
        "    trace.tick(done)\n"
        "tracemalloc.stop()\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["done"] for line in lines] == [120, 260, 300]
    assert lines[-1]["traced_kib"] > lines[0]["traced_kib"] + 500
    assert lines[-1]["VmRSS"] > 0 and lines[-1]["grew"][0]["kib"] >= 390


def test_records_never_ride_in_a_report(monkeypatch: pytest.MonkeyPatch, ray_session: None) -> None:
    """Records go to the inbox, a report carries their key only; and the checkpoint goes in a
    report of its own: Tune keeps the metrics reported with a trial's latest checkpoint to
    the end of the run (a slow one-training pack that checkpointed with its records once
    left a trial state 6 KB larger than a 20-training pack's)."""
    from sweep_engine import pack_trial

    calls: list[tuple[dict[str, Any], bool]] = []

    def report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
        calls.append((metrics, checkpoint is not None))

    monkeypatch.setattr(pack_trial.tune, "report", report)
    spec = TrialSpec.build(dataset="breast_cancer", epochs=1)
    record = Record.clean(spec, 0, mp=0.9, rounds=1, comm_bytes=1, train_seconds=0.0, sweep="s")
    inbox = Inbox()
    pack_trial._report(inbox, [("t1", [record])], set(), checkpoint=True)
    pack_trial._report(inbox, [("t2", [record])], {"t1"}, checkpoint=False)
    assert [(sorted(m), c) for m, c in calls] == [
        (["n_reported", "records_key"], False),
        (["n_reported"], True),
        (["n_reported", "records_key"], False),
    ]
    assert all(len(json.dumps(m)) < 200 < len(record.to_json()) for m, _ in calls)  # a key
    taken = [inbox.take(m["records_key"]) for m, _ in calls if "records_key" in m]
    assert [[(tid, [r.mp for r in recs]) for tid, recs in b] for b in taken] == [
        [("t1", [0.9])],
        [("t2", [0.9])],
    ]


def test_the_inbox_works_after_a_cluster_in_this_process_shut_down(ray_session: None) -> None:
    """``ray.cluster_utils.Cluster.shutdown`` resets the key-value client of the process
    that used it, though that process stays connected to its own Ray (a full suite run
    failed 29 tests that way): the inbox sets it again."""
    from ray.cluster_utils import Cluster
    from ray.experimental import internal_kv

    other = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    other.shutdown()
    assert not internal_kv._internal_kv_initialized()  # what Ray's Cluster does
    spec = TrialSpec.build(dataset="breast_cancer", epochs=1)
    record = Record.clean(spec, 0, mp=0.5, rounds=1, comm_bytes=1, train_seconds=0.0, sweep="s")
    inbox = Inbox()
    ((tid, (got,)),) = inbox.take(inbox.post([("t", [record])]))
    assert tid == "t" and got.mp == 0.5


def test_a_stack_of_tiny_trainings_reaches_the_sink_as_one_part_recorded_once(
    tmp_path: Path,
) -> None:
    """A real sweep (its own Ray, ``transport: local``) of 100 tiny trainings: one pack,
    its first stack of 16 and then a stack of 84, whose records reach the driver together
    and are written as one part file (``sink.PART_AT``). Every training is recorded once,
    ``vflsweep verify`` checks the part, and the same command again runs nothing."""
    from sweep_engine.sink import PART_AT
    from trainables.results.layout import PART_RE, load_manifest

    space = _plan(tmp_path, 100)
    text = space.read_text().replace("run: {pack: auto}", "run: {pack: auto, transport: local}")
    space.write_text(text)
    results = tmp_path / "results"
    cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
    cmd += ["--no-mlflow", "--num-cpus", "2"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "done: 100 trainings recorded, 0 failed" in first.stdout
    records = results / "many" / "records"
    manifest = load_manifest(records)
    (part,) = [name for name, entry in manifest.items() if len(entry.live) >= PART_AT]
    assert PART_RE.fullmatch(part)
    ids = RecordSink(results / "many").read().column("trial_id").to_pylist()
    assert len(ids) == len(set(ids)) == 100
    check = subprocess.run(
        [sys.executable, "-m", "sweep_engine.vflsweep", "verify", str(results / "many")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "100 trainings planned, 100 already recorded, 0 to run" in again.stdout
