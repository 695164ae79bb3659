"""Run a grid plan on Ray Tune in packs: one Tune trial per pack (``sweep_engine/packs.py``).

Why packs: a Tune trial costs about 0.4 s here (a placement group, a trainable start,
a report round trip); a tiny training costs 0.01-0.1 s. The trainable (``entry.start_pack``,
then ``pack_trial.train_pack``) runs its pack's trainings one after another on the same
warm party actors (``run_pack``, which may advance several at once) and reports the
finished trainings' records at the end of each stack (and within one, after at most
``pack_trial.REPORT_EVERY_S``), so the driver writes each training's records as before.
This module is the driver's side: packs, their configs and specs in the object store, the
Tuner, and what failed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import ray
from ray import tune

from sweep_engine import progress
from sweep_engine.context import SweepContext
from sweep_engine.entry import start_pack
from sweep_engine.heartbeat import Tracker, say
from sweep_engine.packs import Pack, packs_for, shape_key, slots
from sweep_engine.plan import Plan, Training
from sweep_engine.runner import (
    Progress,
    context,
    error_text,
    record_failures,
    run_config,
    trial_dirname,
)
from sweep_engine.sink import RecordSink
from sweep_engine.words import plural
from trainables.spec import TrialSpec
from trainables.trial import actor_count, prestart_count


def pack_config(pack: Pack) -> dict[str, str]:
    """A pack's Tune config: its id, bundle count and the party actors its trial starts
    first (``entry.prestart``) only. Tune keeps every trial's config (in the trial, its
    tag, its JSON state) and the trainable sends it back with every report, so the pack's
    specs travel beside it in the object store (``pack_refs``)."""
    prestart = prestart_count(pack.trainings[0].spec)
    return {"pack_id": pack.pack_id, "n_parties": str(pack.n_parties), "prestart": str(prestart)}


def pack_text(pack: Pack) -> str:
    """What the trainable needs of a pack: each training's id, spec and attacks."""
    items = [[t.trial_id, t.spec.model_dump_json(), list(t.attacks)] for t in pack.trainings]
    return json.dumps(items)


def pack_refs(packs: list[Pack]) -> dict[str, ray.ObjectRef]:
    """pack_id -> the pack's ``pack_text`` in the object store; the trainable fetches its
    own pack only (a dict of all packs' specs would reach every trial whole)."""
    return {p.pack_id: ray.put(pack_text(p)) for p in packs}


def plan_packs(plan: Plan, todo: list[Training], data_dir: str | None) -> list[Pack]:
    """``todo`` in packs, sized for the slots of this Ray (``packs.slots``)."""
    run, available = plan.space.run, ray.cluster_resources()
    n = max((actor_count(t.spec) for t in todo), default=2)
    fit = slots(plan, n, available.get("CPU", 1.0), available.get("GPU", 0.0))
    return packs_for(todo, run, fit, data_dir)


def failures_of(
    results: Iterable[tune.Result], packs: list[Pack], seen: set[str]
) -> list[tuple[str, TrialSpec, str]]:
    """The failed rows of a grid's packs: each errored Tune trial's pack from its config.

    A trial that failed before its first report has no config (Ray reads it from the
    metrics): its pack is any whose trainings are neither recorded nor named by another
    failure, and its error is given to them (one of them, if several such trials failed)."""
    by_id = {p.pack_id: p for p in packs}
    failures: list[tuple[str, TrialSpec, str]] = []
    unplaced: list[str] = []
    for r in results:
        if r.error is None:
            continue
        cell = (r.config or {}).get("cell")
        if cell is None:
            unplaced.append(error_text(r.error))
            continue
        failures += pack_failures(by_id[cell["pack_id"]].trainings, seen, error_text(r.error))
    if unplaced:
        named = seen | {f[0] for f in failures}
        many = f"; one of {len(unplaced)} such trials" if len(unplaced) > 1 else ""
        text = f"its Tune trial failed before its first report{many}: {unplaced[0]}"
        for pack in packs:
            failures += pack_failures(pack.trainings, named, text)
    return failures


def pack_failures(
    trainings: Iterable[Training], done: set[str] | frozenset[str], error: str
) -> list[tuple[str, TrialSpec, str]]:
    """A failed pack's rows: its first unrecorded training failed with ``error``, the ones
    after it did not run (a pack runs its trainings in order)."""
    left = [t for t in trainings if t.trial_id not in done]
    first = left[0].trial_id if left else ""
    later = f"not run: its pack failed on training {first} ({error})"
    return [(t.trial_id, t.spec, error if k == 0 else later) for k, t in enumerate(left)]


def _trainable(plan: Plan, ctx: SweepContext, packs: list[Pack]) -> Any:
    # Only the bundles per party count: Tune pickles this function with the trainable
    # and unpickles it each time it starts a trial; closing over ``plan`` would copy
    # every training's spec each time (minutes, and memory churn, at 30k trainings).
    shapes = {p.n_parties: plan.bundles(p.n_parties) for p in packs}

    def bundles(config: dict[str, Any]) -> tune.PlacementGroupFactory:
        return tune.PlacementGroupFactory(shapes[int(config["cell"]["n_parties"])])

    wrapped = tune.with_parameters(start_pack, ctx=ctx, packs=pack_refs(packs))
    return tune.with_resources(wrapped, bundles)


def packs_line(plan: Plan, todo: list[Training], packs: list[Pack]) -> str:
    """``12 trainings in 1 pack (run.pack=auto)``, printed for every grid run: where each
    training runs alone, the line says why (shapes that differ, or trainings each longer
    than ``run.pack_seconds`` by the cost model), so that a new user is not left guessing."""
    run = plan.space.run
    line = f"{plural(len(todo), 'training')} in {plural(len(packs), 'pack')} (run.pack={run.pack}"
    if len(packs) == len(todo) > 1 and run.pack == "auto":
        shapes = len({shape_key(t.spec) for t in todo})
        why = (
            "every training a shape of its own"
            if shapes == len(todo)
            else f"{plural(shapes, 'shape')}, each training estimated at more than "
            f"run.pack_seconds={run.pack_seconds:g}"
        )
        line += f"; one training a pack: {why}"
    return line + ")"


def run_grid(
    plan: Plan,
    sweep_dir: Path,
    todo: list[Training],
    data_dir: str | None,
    tracker: Tracker | None = None,
    sink: RecordSink | None = None,
) -> tuple[int, int]:
    """Run the grid trainings in ``todo`` in packs; returns (written, failed).
    ``tracker``: the run's (heartbeat, progress.json), told what runs and finishes;
    ``sink``: the caller's, so it can read back what this run wrote from memory."""
    sink = RecordSink(sweep_dir) if sink is None else sink
    packs = plan_packs(plan, todo, data_dir)
    say(packs_line(plan, todo, packs))
    ctx = context(plan, data_dir)
    callback = Progress(
        sink,
        ctx.inbox,
        len(todo),
        labels=progress.cell_labels(plan, extra=todo),
        tracker=tracker,
        packs={p.pack_id: tuple(t.trial_id for t in p.trainings) for p in packs},
    )
    configs = [pack_config(p) for p in packs]
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
    # a ResultGrid iterates through __getitem__ (no __iter__), which mypy does not see
    results = cast("Iterable[tune.Result]", tuner.fit())
    callback.take_rest()
    failures = failures_of(results, packs, callback.seen)
    failed = len(callback.failed) + record_failures(sink, failures, plan.space.name)
    if callback.repeats:
        say(f"{plural(callback.repeats, 'training')} ran twice (a retried pack); each written once")
    return len(callback.written) + len(callback.stopped), failed  # stopped: recorded too
