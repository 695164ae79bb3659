"""Early stopping the way Tune and Optuna users expect: Tune's schedulers and Optuna's
pruners, fed each training's validation MP at every epoch end.

How an epoch end reaches Tune. A training's round loop runs where its active party is:
in the trial's process (``transport: local``) or in that party's actor. At each epoch
end the loop tells its ``EpochListener`` (``trainables/rounds.py``), here an
``EpochRelay``; the trial's function thread takes the report off the relay, calls
``tune.report`` with it (so the scheduler, and a pruner, decide) and lets the loop go on
once Tune asks for the next result. When Tune stops a training, the trial's function
thread leaves ``tune.report`` (Tune's ``SystemExit``), tells the loop to stop, and the
training unwinds like one that raised (its parties close, warm actors go back to their
pool); the driver writes its record from the last report, ``status: stopped``
(``stopped_record``).

The metric is always ``val_mp``, the validation rows' MP (a scheduler that read the test
MP would select on the rows the result is reported on); a space with a scheduler or a
pruner holds out validation rows by default (``space.SEARCH_VAL_RATIO``).

Supported: one Tune trial per training (a ``search:`` block). Tune's ``asha`` is
``ASHAScheduler``, ``hyperband`` its asynchronous form with three brackets (Tune's
synchronous HyperBand pauses trials, which needs checkpoints a training does not write),
``median`` the median stopping rule. Optuna pruners (``search.pruner``) need a single
objective: Optuna does not prune multi-objective studies.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any, cast

import optuna
import ray
from ray import tune
from ray.tune.schedulers import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
    FIFOScheduler,
    MedianStoppingRule,
    TrialScheduler,
)
from ray.tune.search.optuna import OptunaSearch

from sweep_engine.context import SweepContext
from trainables.records import Record
from trainables.schedule import Schedule
from trainables.spec import TrialSpec

METRIC = "val_mp"
TIME_ATTR = "epoch"
END = None  # on the up queue: the training returned (or raised)
STOP = "stop"  # on the down queue: Tune stopped the trial


@ray.remote(num_cpus=0)
class _Queues:
    """Named queues in one actor, for round loops that run in party actors: one actor per
    trial process (``_queues``), two queues per training (an actor start costs about a
    second here, more than a stopped training's epochs)."""

    def __init__(self) -> None:
        import asyncio

        self.q: dict[str, asyncio.Queue] = {}
        self.new = asyncio.Queue

    def _queue(self, name: str) -> Any:
        if name not in self.q:
            self.q[name] = self.new()
        return self.q[name]

    async def put(self, name: str, item: Any) -> None:
        await self._queue(name).put(item)

    async def get(self, name: str) -> Any:
        item = await self._queue(name).get()
        if item is END or item == STOP:  # the training's last word: its queues go
            self.q.pop(name, None)
        return item

    def drop(self, names: list[str]) -> None:
        for name in names:
            self.q.pop(name, None)


@functools.cache
def _queues() -> Any:
    """This trial process's queue actor, started on first use."""
    return _Queues.remote()  # type: ignore[attr-defined]  # mypy ignores @ray.remote's type


class EpochRelay:
    """The ``EpochListener`` of one training and the trial thread's end of it: ``up``
    carries (epoch, val_mp, rounds) to the trial, ``down`` the go-ahead back. Plain
    thread queues when the loop runs in this process, an actor's when it runs in a
    party's actor (the relay is pickled there with the protocol)."""

    def __init__(self, remote: bool) -> None:
        self.actor = _queues() if remote else None
        self.local: dict[str, queue.Queue[Any]] | None = (
            None if remote else {"up": queue.Queue(), "down": queue.Queue()}
        )
        self.key = uuid.uuid4().hex  # this training's queues in the shared actor

    def __getstate__(self) -> dict[str, Any]:
        assert self.actor is not None, "only a relay through an actor leaves this process"
        return {"actor": self.actor, "local": None, "key": self.key}

    def put(self, name: str, item: Any) -> None:
        if self.actor is not None:
            ray.get(self.actor.put.remote(f"{self.key}:{name}", item))
        else:
            assert self.local is not None
            self.local[name].put(item)

    def get(self, name: str) -> Any:
        if self.actor is not None:
            return ray.get(self.actor.get.remote(f"{self.key}:{name}"))
        assert self.local is not None
        return self.local[name].get()

    def close(self) -> None:
        """The training's queues, gone from the shared actor."""
        if self.actor is not None:
            ray.get(self.actor.drop.remote([f"{self.key}:up", f"{self.key}:down"]))

    def epoch_end(self, epoch: int, mp: float, rounds: int) -> None:
        """At the training's epoch end: report it and wait for the go-ahead; a stop
        unwinds the training (its parties close as after any error)."""
        self.put("up", (epoch, mp, rounds))
        if self.get("down") == STOP:
            raise TrainingStopped(f"stopped after epoch {epoch}")


class TrainingStopped(Exception):
    """A scheduler or pruner stopped this training at an epoch end (not a failure)."""


def train_reporting(
    run: Callable[[Schedule], list[Record]],
    ctx: SweepContext,
    spec: TrialSpec,
    also: dict[str, float],
) -> list[Record]:
    """``run`` (one training) with each epoch end reported to Tune as it happens; its
    records when it finishes. A stopped training never returns here: Tune ends the
    trial while ``tune.report`` waits. ``also``: the trial's other metrics (NaN at an
    epoch end), which Tune wants in every result."""
    relay = EpochRelay(remote=ctx.placement.remote)
    out: dict[str, Any] = {}
    n_labeled = labeled_rows(spec, ctx.data_dir)

    def work() -> None:
        try:
            out["records"] = run(dataclasses.replace(ctx.schedule, listener=relay))
        except BaseException as err:  # raised again in the trial's thread
            out["error"] = err
        finally:
            relay.put("up", END)

    thread = threading.Thread(target=work, name="training", daemon=True)
    thread.start()
    while (item := relay.get("up")) is not END:
        epoch, mp, rounds = item
        try:
            tune.report(
                {**also, **epoch_result(spec, ctx.sweep, epoch, mp, rounds), "n_labeled": n_labeled}
            )
        except SystemExit:  # Tune stopped the trial: the training unwinds, parties close
            relay.put("down", STOP)
            thread.join(timeout=60)
            relay.close()
            raise
        relay.put("down", "go")
    thread.join()
    relay.close()
    if "error" in out:
        raise out["error"]
    return out["records"]


def labeled_rows(spec: TrialSpec, data_dir: str | None) -> int:
    """The rows the training learns from (its record's ``n_labeled``), for a stopped
    record; the dataset is the one the training loads (cached)."""
    from trainables.data import load_dataset, rows_for

    return len(rows_for(spec, load_dataset(spec.dataset, data_dir, **spec.dataset_params)).labeled)


def epoch_result(spec: TrialSpec, sweep: str, epoch: int, mp: float, rounds: int) -> dict:
    """What Tune sees of an epoch end: enough for the driver to write a stopped record."""
    return {
        "config_hash": spec.config_hash,
        "status": "running",
        "final": False,
        TIME_ATTR: epoch,
        METRIC: mp,
        "rounds": rounds,
        "spec_json": spec.model_dump_json(),
        "sweep": sweep,
    }


def stopped_record(last: dict[str, Any], by: str) -> Record:
    """The record of a training stopped after ``last`` (its last epoch report): no test
    MP (it never finished), the epochs run and the validation MP it was stopped at."""
    spec = TrialSpec.model_validate_json(last["spec_json"])
    extra = {"epochs_run": int(last[TIME_ATTR]), "stopped_by": by}
    return Record.clean(
        spec, int(last["n_labeled"]), mp=None, val_mp=float(last[METRIC]),
        rounds=int(last["rounds"]), comm_bytes=0, train_seconds=0.0, status="stopped",
        extra=json.dumps(extra),
        trial_id=str(last["config_hash"]), sweep=str(last["sweep"]),
    )  # fmt: skip


def stopped_by(space: Any) -> str:
    """The name a stopped record carries: the scheduler's, or the pruner's."""
    if space.run.scheduler is not None:
        return f"scheduler:{space.run.scheduler.name}"
    return f"pruner:{space.search.pruner}"


def optuna_pruner(space: Any, epochs: int) -> optuna.pruners.BasePruner | None:
    """The study's pruner for ``search.pruner`` (None: ``none``); it may decide from the
    ``search.pruner_grace``-th epoch on."""
    search = space.search
    name, grace = search.pruner, search.pruner_grace
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=grace - 1)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=grace, max_resource=epochs)
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=grace)
    return None


def scheduler(space: Any, searcher: PrunedSearch, epochs: int) -> TrialScheduler | None:
    """Tune's scheduler for ``run.scheduler``, else the pruner's (``OptunaPruning``) when
    the searcher has one, else None; ``epochs``: the trainings' (``max_epochs``'s
    default)."""
    block = space.run.scheduler
    if block is None:
        return None if searcher.pruner is None else OptunaPruning(searcher)
    common: dict[str, Any] = {"time_attr": TIME_ATTR, "metric": METRIC, "mode": "max"}
    if block.name == "median":
        return MedianStoppingRule(grace_period=block.grace_epochs, **common)
    rungs = {
        "max_t": block.max_epochs or epochs,
        "grace_period": block.grace_epochs,
        "reduction_factor": block.reduction_factor,
    }
    if block.name == "asha":
        return ASHAScheduler(**common, **rungs)
    return AsyncHyperBandScheduler(brackets=3, **common, **rungs)


class PrunedSearch(OptunaSearch):
    """Tune's Optuna searcher, its study with ``pruner`` (``OptunaPruning`` reports the
    intermediate values, once), telling Optuna that a trial stopped at an epoch end (by
    the pruner or a Tune scheduler) was pruned, not complete at its last value."""

    def __init__(self, *args: Any, pruner: optuna.pruners.BasePruner | None = None, **kw: Any):
        self.pruner = pruner
        super().__init__(*args, **kw)

    def _setup_study(self, mode: Any) -> None:
        super()._setup_study(mode)
        if self.pruner is not None:
            # Ray types _ot_study as None (its __init__'s value); _setup_study made the study
            study = cast(optuna.study.Study, self._ot_study)
            study.pruner = self.pruner

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if self.pruner is None and result.get("final") is False:
            super().on_trial_result(trial_id, result)  # the epoch curve, for the record

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if result is not None and result.get("final") is False:  # stopped at an epoch end
            if trial_id not in self._completed_trials:
                ot_trial = self._ot_trials[trial_id]
                study = cast(optuna.study.Study, self._ot_study)  # Ray types it as None
                study.tell(ot_trial, state=optuna.trial.TrialState.PRUNED)
                self._completed_trials.add(trial_id)
            return
        super().on_trial_complete(trial_id, result, error)


class OptunaPruning(FIFOScheduler):
    """An Optuna pruner as a Tune scheduler: each epoch's ``val_mp`` reported to the
    trial's Optuna trial, stopped when the study's pruner says so."""

    def __init__(self, searcher: PrunedSearch) -> None:
        super().__init__()
        self.searcher = searcher

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if result.get("final") is not False:
            return TrialScheduler.CONTINUE
        ot_trial = self.searcher._ot_trials[trial.trial_id]
        ot_trial.report(float(result[METRIC]), int(result[TIME_ATTR]))
        return TrialScheduler.STOP if ot_trial.should_prune() else TrialScheduler.CONTINUE
