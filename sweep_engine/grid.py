"""Run a grid plan on Ray Tune in packs: one Tune trial per pack (``sweep_engine/packs.py``).

Why packs: a Tune trial costs about 0.4 s here (a placement group, a trainable start,
a report round trip); a tiny training costs 0.01-0.1 s. The trainable runs its pack's
trainings one after another on the same warm party actors (``run_pack``, which may
advance several at once) and reports the finished trainings' records about every
``REPORT_EVERY_S``, so the driver writes each training's records as before.

Failures stay per training:
- a ConfigError or DefenseNeverApplied (deterministic) becomes that training's error
  record at once, never retried;
- a fault (an actor or node lost) fails the Tune trial, which Tune retries up to
  ``run.max_failures``; every report carries a checkpoint listing the trainings already
  reported, so the retried trial starts at the training that failed, not at the pack's
  start. The driver also ignores a training it has already written in this run.
- a pack that keeps failing: the training it failed on gets the error record, and the
  pack's trainings that never ran get one saying so (a re-run runs both again).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from ray import tune

from sweep_engine import progress
from sweep_engine.faults import FAULT_ENV, fault_at
from sweep_engine.heartbeat import Tracker, say
from sweep_engine.packs import Pack, make_packs, slots
from sweep_engine.plan import Plan, Training
from sweep_engine.runner import (
    Progress,
    SweepContext,
    context,
    error_record,
    error_text,
    record_failures,
    run_config,
    trial_dirname,
)
from sweep_engine.sink import RecordSink
from sweep_engine.words import plural
from trainables.errors import MissingDataError
from trainables.jobs import Job
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import actor_count, run_pack

REPORT_EVERY_S = 0.5  # a pack reports its finished trainings at most this often
CHECKPOINT_EVERY_S = 10.0  # and checkpoints the ids reported at most this often
DONE_FILE = "done.json"  # in a pack's checkpoint: the trial ids already reported


def pack_config(pack: Pack) -> dict[str, str]:
    """A pack's Tune config: its id and bundle count only. Tune keeps every trial's config
    (in the trial, its tag, its JSON state) and the trainable sends it back with every
    report, so the pack's specs travel beside it in the object store (``pack_refs``)."""
    return {"pack_id": pack.pack_id, "n_parties": str(pack.n_parties)}


def pack_text(pack: Pack) -> str:
    """What the trainable needs of a pack: each training's id, spec and attacks."""
    items = [[t.trial_id, t.spec.model_dump_json(), list(t.attacks)] for t in pack.trainings]
    return json.dumps(items)


def pack_refs(packs: list[Pack]) -> dict[str, ray.ObjectRef]:
    """pack_id -> the pack's ``pack_text`` in the object store; the trainable fetches its
    own pack only (a dict of all packs' specs would reach every trial whole)."""
    return {p.pack_id: ray.put(pack_text(p)) for p in packs}


def _jobs(text: str) -> tuple[list[str], list[Job]]:
    items = json.loads(text)
    ids = [item[0] for item in items]
    jobs = [
        Job(TrialSpec.model_validate_json(spec), tuple((a[0], a[1]) for a in attacks))
        for _, spec, attacks in items
    ]
    return ids, jobs


class InjectedFault(RuntimeError):
    """Raised by ``VFLSWEEP_FAULT=fail_training:N`` (tests only): a fault, so retried."""


def _fault_at() -> int | None:
    """With ``VFLSWEEP_FAULT=fail_training:N``, a pack's first attempt fails once N - 1 of
    its trainings have finished (tests: the retry must start there, not at the pack's)."""
    return fault_at("fail_training")


def _inject(fault: int | None, finished: int) -> None:
    if fault is not None and finished == fault - 1:
        raise InjectedFault(f"{FAULT_ENV}=fail_training:{fault}")


def _reported_before() -> set[str]:
    """Trial ids a previous attempt of this pack reported (from Tune's checkpoint)."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return set()
    with checkpoint.as_directory() as folder:
        return set(json.loads((Path(folder) / DONE_FILE).read_text()))


def _report(outbox: list[tuple[str, list[Record]]], reported: set[str], checkpoint: bool) -> None:
    """Send finished trainings to the driver; with ``checkpoint``, also a checkpoint naming
    every training reported so far (a retried pack skips them). Not on every report: each
    checkpoint costs Tune a snapshot; a retry re-runs at most ``CHECKPOINT_EVERY_S`` of
    work, whose second report the driver ignores."""
    reported.update(tid for tid, _ in outbox)
    metrics = {
        "pack_json": json.dumps([[t, [r.to_json() for r in recs]] for t, recs in outbox]),
        "n_reported": len(reported),
    }
    tune.report(metrics)
    if not checkpoint:
        return
    # The checkpoint goes in a report of its own: Tune keeps the metrics reported with a
    # trial's latest checkpoint to the end of the run, and the records must not ride there
    # (the driver pops them from results, not from the checkpoint's copy).
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / DONE_FILE).write_text(json.dumps(sorted(reported)))
        tune.report(
            {"n_reported": len(reported)}, checkpoint=tune.Checkpoint.from_directory(folder)
        )


def train_pack(config: dict[str, Any], ctx: SweepContext, packs: dict[str, ray.ObjectRef]) -> None:
    """The Tune trainable of a grid: the pack's trainings in order, records reported."""
    ids, jobs = _jobs(ray.get(packs[config["cell"]["pack_id"]]))
    reported = _reported_before()
    fault = None if reported else _fault_at()
    todo = [i for i, tid in enumerate(ids) if tid not in reported]
    outbox: list[tuple[str, list[Record]]] = []
    last = last_checkpoint = time.perf_counter()
    outcomes = run_pack(
        [jobs[i] for i in todo],
        [ids[i] for i in todo],
        ctx.placement,
        data_dir=ctx.data_dir,
        sweep=ctx.sweep,
    )
    failing = False
    try:
        _inject(fault, 0)
        for finished, (j, outcome) in enumerate(outcomes, start=1):
            i = todo[j]
            if isinstance(outcome, Exception):  # deterministic: recorded, never retried
                outcome = [error_record(jobs[i].spec, ids[i], ctx.sweep, error_text(outcome))]
            outbox.append((ids[i], outcome))
            _inject(fault, finished)  # trainings may finish out of order (stacked)
            now = time.perf_counter()
            if now - last >= REPORT_EVERY_S:
                checkpoint = now - last_checkpoint >= CHECKPOINT_EVERY_S
                _report(outbox, reported, checkpoint)
                outbox, last = [], now
                last_checkpoint = now if checkpoint else last_checkpoint
    except MissingDataError:
        raise  # this node lacks a data file: a fault of the node (maybe elsewhere next time)
    except BaseException:
        failing = True  # a fault: checkpoint what finished, so the retry starts here
        raise
    finally:
        if outbox or failing:
            _final_report(outbox, reported, failing)


def _final_report(
    outbox: list[tuple[str, list[Record]]], reported: set[str], failing: bool
) -> None:
    """The last report: what finished, and with a fault a checkpoint. Best effort while
    failing: a trial Tune is stopping may refuse it, and the fault is what must surface."""
    if not failing:
        _report(outbox, reported, checkpoint=False)
        return
    try:
        _report(outbox, reported, checkpoint=True)
    except Exception:  # the original fault propagates; a retry re-runs these trainings
        pass


def plan_packs(plan: Plan, todo: list[Training], data_dir: str | None) -> list[Pack]:
    """``todo`` in packs, sized for the slots of this Ray (``packs.slots``)."""
    run, available = plan.space.run, ray.cluster_resources()
    n = max((actor_count(t.spec) for t in todo), default=2)
    fit = slots(plan, n, available.get("CPU", 1.0), available.get("GPU", 0.0))
    remote = run.transport == "ray"
    return make_packs(
        todo, run.pack, fit, run.pack_seconds, remote, data_dir, vectorize=run.vectorize
    )


def _trainable(plan: Plan, ctx: SweepContext, packs: list[Pack]) -> Any:
    # Only the bundles per party count: Tune pickles this function with the trainable
    # and unpickles it each time it starts a trial; closing over ``plan`` would copy
    # every training's spec each time (minutes, and memory churn, at 30k trainings).
    shapes = {p.n_parties: plan.bundles(p.n_parties) for p in packs}

    def bundles(config: dict[str, Any]) -> tune.PlacementGroupFactory:
        return tune.PlacementGroupFactory(shapes[int(config["cell"]["n_parties"])])

    wrapped = tune.with_parameters(train_pack, ctx=ctx, packs=pack_refs(packs))
    return tune.with_resources(wrapped, bundles)


def run_grid(
    plan: Plan,
    sweep_dir: Path,
    todo: list[Training],
    data_dir: str | None,
    tracker: Tracker | None = None,
) -> tuple[int, int]:
    """Run the grid trainings in ``todo`` in packs; returns (written, failed).
    ``tracker``: the run's (heartbeat, progress.json), told what runs and finishes."""
    sink = RecordSink(sweep_dir)
    packs = plan_packs(plan, todo, data_dir)
    if len(packs) < len(todo):
        in_packs = f"{plural(len(todo), 'training')} in {plural(len(packs), 'pack')}"
        say(f"{in_packs} (run.pack={plan.space.run.pack})")
    callback = Progress(
        sink,
        len(todo),
        labels=progress.cell_labels(plan, extra=todo),
        tracker=tracker,
        packs={p.pack_id: tuple(t.trial_id for t in p.trainings) for p in packs},
    )
    configs = [pack_config(p) for p in packs]
    ctx = context(plan, data_dir)
    tuner = tune.Tuner(
        _trainable(plan, ctx, packs),
        param_space={"cell": tune.grid_search(configs)},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=plan.space.run.max_concurrent_trials,
            reuse_actors=plan.space.run.reuse_actors,
            trial_dirname_creator=trial_dirname,
        ),
        run_config=run_config(plan, sweep_dir, callback, "grid"),
    )
    results = tuner.fit()
    failures = []
    seen = callback.seen
    by_id = {p.pack_id: p for p in packs}
    for r in results:
        if r.error is None:
            continue
        pack = by_id[r.config["cell"]["pack_id"]]
        left = [t for t in pack.trainings if t.trial_id not in seen]
        for k, training in enumerate(left):
            text = error_text(r.error)
            if k > 0:
                text = f"not run: its pack failed on training {left[0].trial_id} ({text})"
            failures.append((training.trial_id, training.spec, text))
    failed = len(callback.failed) + record_failures(sink, failures, plan.space.name)
    if callback.repeats:
        say(f"{plural(callback.repeats, 'training')} ran twice (a retried pack); each written once")
    return len(callback.written), failed
