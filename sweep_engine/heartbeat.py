"""A sweep that is busy says so: a line after ``HEARTBEAT_S`` without a finished training.

Why: a sweep on the adult dataset printed nothing for its first 141 s (Ray starting, then
one pack training); a user cannot tell that from a hang. ``Tracker`` holds what this run
is doing (fed by the Tune callback, ``runner.Progress``); ``Heartbeat``, a daemon thread
started before Ray is, prints ``Tracker.heartbeat_line`` whenever nothing finished for the
interval, and keeps ``<sweep>/progress.json`` (``status.PROGRESS``) current for ``vflsweep
status``. A thread rather than a Tune callback: Tune calls its callbacks only once
``Tuner.fit`` runs, and not while Ray starts or a placement group waits.

``VFLSWEEP_HEARTBEAT_S`` overrides the interval (tests use 1-2 s; 0 turns it off).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from sweep_engine.machine_load import LoadWatch, busy_text
from sweep_engine.words import duration, plural

HEARTBEAT_S = 30.0  # seconds without a finished training before a heartbeat line
HEARTBEAT_ENV = "VFLSWEEP_HEARTBEAT_S"
SAVE_EVERY_S = 2.0  # progress.json at most this often (each write is an fsync)
LOAD_SAMPLE_S = 10.0  # how often other work's share of the machine is read (machine_load)
_PRINT = threading.Lock()


def say(text: str) -> None:
    """One whole line on stdout: the heartbeat thread and the Tune callback both print, and
    ``print`` writes a line and its newline in two calls another thread can come between."""
    with _PRINT:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def interval() -> float:
    """``HEARTBEAT_S``, or ``VFLSWEEP_HEARTBEAT_S`` when set to a number (0: off)."""
    try:
        return max(0.0, float(os.environ.get(HEARTBEAT_ENV, HEARTBEAT_S)))
    except ValueError:
        return HEARTBEAT_S


def eta_seconds(
    elapsed: float, done: int, left: int, estimate_s: float | None = None
) -> float | None:
    """Seconds until the ``left`` trainings are done: the rate so far (``elapsed`` since the
    first training started, over the ``done`` ones) times ``left``; before anything is done,
    ``estimate_s`` (the plan's estimate, when the caller has one) or None."""
    if left <= 0:
        return 0.0
    if done > 0 and elapsed > 0:
        return elapsed / done * left
    return estimate_s


def eta_text(seconds: float | None, from_rate: bool) -> str:
    if seconds is None:
        return "ETA: no estimate yet"
    return f"ETA ~{duration(seconds)}" + ("" if from_rate else " (the plan's estimate)")


@dataclass
class Running:
    """A Tune trial in flight: a grid pack (its trainings' ids) or one search training."""

    kind: str  # "pack" or "trial"
    what: str  # a search trial's parameters; a pack's cells come from ``trainings``
    trainings: tuple[str, ...]
    since: float  # monotonic


class Tracker:
    """What this run is doing; written by the Tune callback, read by the heartbeat thread."""

    def __init__(
        self,
        to_run: int,
        *,
        planned: int | None = None,
        recorded_before: int = 0,
        sweep_dir: Path | None = None,
        estimate_s: float | None = None,
    ) -> None:
        self.to_run, self.recorded_before = to_run, recorded_before
        self.planned = to_run + recorded_before if planned is None else planned
        self.sweep_dir, self.estimate_s = sweep_dir, estimate_s
        self.labels: dict[str, str] = {}  # trial_id -> its cell, for "now: ..."
        self.phase = "starting"
        self.done = self.failed = 0
        self.finished_ids: set[str] = set()
        self.running: dict[str, Running] = {}
        self.started = self.last_event = time.monotonic()
        self.started_wall = time.time()
        self.first_start: float | None = None
        self._saved = float("-inf")
        self._ran = False  # past "starting": from then on progress.json is written
        self.others: float | None = None  # other work's CPU share lately (machine_load.py)
        self.cpus = os.cpu_count() or 1
        self._lock = threading.Lock()
        if sweep_dir is not None:  # a run of this folder before, in this process, ended
            from sweep_engine.status import reopen

            reopen(sweep_dir)

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks (``tuner.pkl``), so ours and its tracker: no lock."""
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
            self._ran = self._ran or phase == "running"
        self.save(force=True)

    def trial_started(self, key: str, kind: str, what: str, trainings: Sequence[str]) -> None:
        now = time.monotonic()
        with self._lock:
            self.phase, self._ran = "running", True
            self.first_start = now if self.first_start is None else self.first_start
            self.running[key] = Running(kind, what, tuple(trainings), now)

    def trial_ended(self, key: str) -> None:
        with self._lock:
            self.running.pop(key, None)

    def training_finished(self, trial_id: str, ok: bool) -> None:
        with self._lock:
            self.finished_ids.add(trial_id)
            self.done += 1 if ok else 0
            self.failed += 0 if ok else 1
            self.last_event = time.monotonic()
        self.save()

    def beat(self) -> None:
        """A heartbeat line was printed: the next one after another quiet interval."""
        with self._lock:
            self.last_event = time.monotonic()

    def quiet_for(self, now: float) -> float:
        return now - self.last_event

    @property
    def left(self) -> int:
        return max(self.to_run - self.done - self.failed, 0)

    def eta(self, now: float) -> float | None:
        elapsed = 0.0 if self.first_start is None else now - self.first_start
        return eta_seconds(elapsed, self.done + self.failed, self.left, self.estimate_s)

    def _now_text(self, run: Running) -> str:
        """A pack's next unfinished training's cell (packs run in order), or its params."""
        if run.kind != "pack":
            return run.what
        todo = [t for t in run.trainings if t not in self.finished_ids]
        return self.labels.get(todo[0], todo[0][:8]) if todo else run.what

    def running_text(self, now: float) -> str:
        """``1 pack running for 2m 10s (8 trainings; now: seed=0)`` or the phase."""
        with self._lock:
            runs = list(self.running.values())
            if not runs:
                if self.phase == "starting":
                    return "starting Ray"
                return "starting the first trial" if self.first_start is None else "between trials"
            kinds = {r.kind for r in runs}
            noun = "pack" if kinds == {"pack"} else "trial"
            longest = max(now - r.since for r in runs)
            n = sum(len(r.trainings) for r in runs)
            nows = [t for t in (self._now_text(r) for r in runs[:2]) if t]
        more = f", +{len(runs) - 2} more" if len(runs) > 2 else ""
        inside = [plural(n, "training")] if noun == "pack" else []
        inside += [f"now: {'; '.join(nows)}{more}"] if nows else []
        what = f"{plural(len(runs), noun)} running for {duration(longest)}"
        return what + (f" ({', '.join(inside)})" if inside else "")

    def heartbeat_line(self, now: float) -> str:
        seconds = self.eta(now)
        counts = f"{self.done + self.failed} of {plural(self.to_run, 'training')} done"
        counts += f" ({self.failed} failed)" if self.failed else ""
        from_rate = self.done + self.failed > 0
        return (
            f"[still running] {duration(now - self.started)}: {self.running_text(now)}; "
            f"{counts}, {self.left} left; {eta_text(seconds, from_rate)}"
            + busy_text(self.others, self.cpus, from_rate)
        )

    def snapshot(self, now: float) -> dict[str, Any]:
        """``progress.json``: what ``vflsweep status`` shows of a running sweep."""
        with self._lock:
            running = [
                {
                    "kind": r.kind,
                    "trainings": len(r.trainings),
                    "now": self._now_text(r),
                    "for_s": round(now - r.since, 1),
                }
                for r in self.running.values()
            ]
        eta = self.eta(now)
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "phase": self.phase,
            "planned": self.planned,
            "recorded_before": self.recorded_before,
            "to_run": self.to_run,
            "done": self.done,
            "failed": self.failed,
            "left": self.left,
            "running": running,
            "started_at": _iso(self.started_wall),
            "updated_at": _iso(time.time()),
            "elapsed_s": round(now - self.started, 1),
            "eta_s": None if eta is None else round(eta, 1),
            "eta_from": "rate" if self.done + self.failed else "plan",
            "others_cpu_share": None if self.others is None else round(self.others, 3),
        }

    def save(self, force: bool = False) -> None:
        """Write ``progress.json`` (atomically), at most every ``SAVE_EVERY_S`` unless
        ``force``; best effort: a status file never stops a sweep. Nothing while starting:
        a space refused once Ray is up (too big for the cluster) leaves no file behind."""
        from sweep_engine.status import write_progress

        now = time.monotonic()
        if self.sweep_dir is None or not self._ran:
            return
        if not force and now - self._saved < SAVE_EVERY_S:
            return
        self._saved = now
        try:
            write_progress(self.sweep_dir, self.snapshot(now))
        except OSError:
            pass


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds")


class Heartbeat:
    """``with Heartbeat(tracker):`` a daemon thread printing the tracker's heartbeat line
    after each quiet interval; it stops (and is joined) when the block ends, Ctrl-C too.
    Once ``stopping`` is set (the CLI's Ctrl-C event) it prints nothing more: the user
    was told the sweep is stopping, and "still running" would read as the opposite."""

    def __init__(
        self,
        tracker: Tracker,
        every: float | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.tracker = tracker
        self.every = interval() if every is None else every
        self.stopping = stopping or threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vflsweep-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.tracker.save(force=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.tracker.set_phase("ended" if exc_type is None else "stopped")

    def _run(self) -> None:
        tick = min(1.0, self.every / 4) if self.every > 0 else 1.0
        watch, sampled = LoadWatch(), time.monotonic()
        while not self._stop.wait(tick):
            now = time.monotonic()
            if now - sampled >= LOAD_SAMPLE_S:  # other work's share since the last sample
                self.tracker.others, sampled = watch.sample(), now
            if self.stopping.is_set():
                continue
            if self.every > 0 and self.tracker.quiet_for(now) >= self.every:
                say(self.tracker.heartbeat_line(now))
                self.tracker.beat()
            self.tracker.save()
