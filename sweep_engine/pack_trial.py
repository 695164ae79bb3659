"""The trainable side of a grid pack: its trainings in order, records reported, faults kept
per training (the driver's side is ``grid.py``; ``entry.start_pack`` calls ``train_pack``).

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

import dataclasses
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from ray import tune

from sweep_engine.context import SweepContext
from sweep_engine.inbox import Inbox
from sweep_engine.runner import error_record, error_text
from trainables.errors import MissingDataError
from trainables.jobs import Job
from trainables.records import Record
from trainables.results.faults import FAULT_ENV, fault_at
from trainables.spec import TrialSpec
from trainables.trial import run_pack

REPORT_EVERY_S = 0.5  # the longest a finished training waits in its pack, within a stack
CHECKPOINT_EVERY_S = 10.0  # and checkpoints the ids reported at most this often
DONE_FILE = "done.json"  # in a pack's checkpoint: the trial ids already reported


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


class _Outbox:
    """A pack's finished trainings not sent yet, and since when it holds them.

    Sent (``send``) at the end of a stack (``stack_done``: a stack's outcomes come in a
    burst, and the next stack may train for minutes) unless a send went less than
    ``REPORT_EVERY_S`` before (short stacks in a row, a lone tiny training each: a report
    costs the sweep ~10 ms, more than such a training), and within a burst once its oldest
    has waited ``REPORT_EVERY_S``; with a checkpoint at most every ``CHECKPOINT_EVERY_S``.
    So a stack's records go as one batch (one part file in the driver for 64 or more:
    ``sink.PART_AT``).
    """

    def __init__(self, inbox: Inbox, reported: set[str]) -> None:
        self.inbox, self.reported = inbox, reported
        self.items: list[tuple[str, list[Record]]] = []
        self.since = 0.0  # when the oldest of ``items`` came
        self.last_send = -math.inf
        self.last_checkpoint = time.perf_counter()

    def add(self, trial_id: str, records: list[Record]) -> None:
        if not self.items:
            self.since = time.perf_counter()
        self.items.append((trial_id, records))

    def send(self, checkpoint: bool | None = None) -> None:
        """Send what it holds (nothing: no report); ``checkpoint`` None: if one is due."""
        if not self.items and not checkpoint:
            return
        now = time.perf_counter()
        if checkpoint is None:
            checkpoint = now - self.last_checkpoint >= CHECKPOINT_EVERY_S
        # let go of them first: when Tune refuses the report (a Ctrl-C, a lost trial) after
        # the inbox took them, the driver finds them there (``Progress.take_rest``); sent
        # again by the final report, they were in the inbox twice
        items, self.items = self.items, []
        self.last_send = now
        _report(self.inbox, items, self.reported, checkpoint)
        self.last_checkpoint = now if checkpoint else self.last_checkpoint

    def maybe_send(self) -> None:
        if self.items and time.perf_counter() - self.since >= REPORT_EVERY_S:
            self.send()

    def stack_done(self) -> None:
        if time.perf_counter() - self.last_send >= REPORT_EVERY_S:
            self.send()


def _report(
    inbox: Inbox, outbox: list[tuple[str, list[Record]]], reported: set[str], checkpoint: bool
) -> None:
    """Send finished trainings to the driver (their records into ``inbox``, the key in a
    Tune report); with ``checkpoint``, also a checkpoint naming every training reported so
    far (a retried pack skips them). Not on every report: each checkpoint costs Tune a
    snapshot; a retry re-runs at most ``CHECKPOINT_EVERY_S`` of work, whose second report
    the driver ignores."""
    metrics: dict[str, Any] = {"records_key": inbox.post(outbox)} if outbox else {}
    reported.update(tid for tid, _ in outbox)
    tune.report(metrics | {"n_reported": len(reported)})
    if not checkpoint:
        return
    # The checkpoint goes in a report of its own: Tune keeps the metrics reported with a
    # trial's latest checkpoint to the end of the run (a key there names a batch long taken).
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
    outbox = _Outbox(ctx.inbox, reported)
    outcomes = run_pack(
        [jobs[i] for i in todo],
        [ids[i] for i in todo],
        ctx.placement,
        data_dir=ctx.data_dir,
        sweep=ctx.sweep,
        schedule=dataclasses.replace(ctx.schedule, stack_done=outbox.stack_done),
    )
    failing = False
    try:
        _inject(fault, 0)
        for finished, (j, outcome) in enumerate(outcomes, start=1):
            i = todo[j]
            if isinstance(outcome, Exception):  # deterministic: recorded, never retried
                outcome = [error_record(jobs[i].spec, ids[i], ctx.sweep, error_text(outcome))]
            outbox.add(ids[i], outcome)
            _inject(fault, finished)  # trainings may finish out of order (stacked)
            outbox.maybe_send()
    except MissingDataError:
        raise  # this node lacks a data file: a fault of the node (maybe elsewhere next time)
    except BaseException:
        failing = True  # a fault: checkpoint what finished, so the retry starts here
        raise
    finally:
        _final_report(outbox, failing)


def _final_report(outbox: _Outbox, failing: bool) -> None:
    """The last report: what finished, and with a fault a checkpoint. Best effort while
    failing: a trial Tune is stopping may refuse it, and the fault is what must surface."""
    if not failing:
        outbox.send(checkpoint=False)
        return
    try:
        outbox.send(checkpoint=True)
    except Exception:  # the original fault propagates; a retry re-runs these trainings
        pass
