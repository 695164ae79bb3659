"""Faults outside the trainings end a sweep in one sentence and an exit code of their own.

Why: a full disk, a read-only results folder, ``--results`` naming a file, a permission
denied or a lost Ray head used to end in a raw traceback with exit code 1, the code of "a
training failed", although nothing of the sweep was lost: the records written are complete
(``sink.py`` writes each atomically) and a re-run resumes. So the driver ends with one
``error:`` line on stderr (the path or the cause, how much is recorded, what to do) and a
code a script can tell apart (``docs/cli.md``):

- 0 every training recorded, 1 some training failed, 2 bad input, 130 interrupted;
- ``EXIT_NOT_WRITABLE`` (4): the results folder cannot be written: a file where a folder
  must be, a read-only file system, permission denied, the disk full;
- ``EXIT_RAY_LOST`` (5): the Ray head (its GCS) stopped answering.

What is known up front is refused before anything is planned or started
(``check_writable``); a full disk shows only when a write fails (``end``). A lost head is
watched for (``RayHeadWatch``): Ray's own client ends the process with a log line and exit
1 once the GCS stayed away for ``gcs_rpc_server_reconnect_timeout_s`` (60 s), so the watch
must speak first, after half that time. ``progress.json`` says how the run ended.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweep_engine.lock import SweepLock
    from sweep_engine.plan import Plan

EXIT_NOT_WRITABLE = 4
EXIT_RAY_LOST = 5
DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
NO_WRITE = (errno.EROFS, errno.EACCES, errno.EPERM)
NOT_A_FOLDER = (errno.ENOTDIR, errno.EEXIST)
RAY_LOST_TYPES = ("RaySystemError", "RpcError", "GcsUnavailableError")
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"  # Ray's own, read by its client
RAY_RECONNECT_S = 60.0  # its default


class SweepFault(Exception):
    """A fault of the machine, not of a training: ``what`` happened, ``todo`` about it."""

    def __init__(self, code: int, what: str, todo: str) -> None:
        super().__init__(what)
        self.code, self.what, self.todo = code, what, todo


@dataclass
class Where:
    """How far the command got: what ``end`` counts and updates (set by ``cli.main``)."""

    results: Path
    plan: Plan | None = None
    sweep_dir: Path | None = None
    lock: SweepLock | None = None
    # trainings of ``plan`` recorded now (``cli.recorded``, given by the CLI: this module
    # is below it)
    recorded: Callable[[], int] | None = None


def check_writable(results: Path, name: str) -> None:
    """Refuse a results folder this process cannot write, before planning or Ray.

    A real write, not ``os.access``: as root, permission bits say yes to everything, and
    a read-only mount answers only to a write. The probe is a hidden file in the deepest
    folder that exists on the way to ``<results>/<name>``, removed at once.
    """
    target = results / name
    found = next(p for p in (target, *target.parents) if p.exists() or p.is_symlink())
    if not found.is_dir():
        what = f"--results {results}" if found == results else f"{found}, on the way to {target},"
        raise SweepFault(
            EXIT_NOT_WRITABLE,
            f"{what} is a file, not a folder",
            "pass --results with a folder, or move the file away",
        )
    probe = found / f".vflsweep-write-check-{uuid.uuid4().hex[:8]}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.unlink(probe)
    except OSError as err:
        fault = classify(OSError(err.errno, err.strerror, str(found)))
        raise (fault or err) from None


def classify(err: BaseException) -> SweepFault | None:
    """The fault ``err`` (or what caused it) is, or None for anything else (a bug: its
    traceback stays). Ray wraps what a worker raised; the chain is walked."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        fault = _one(e)
        if fault is not None:
            return fault
        todo += [e.__cause__, getattr(e, "cause", None)]  # not __context__: a bug stays one
        if type(e).__name__ == "TuneError":  # Tune re-raises a callback's error as text, from
            todo.append(e.__context__)  # inside the ``except`` that caught it
    return None


def _one(e: BaseException) -> SweepFault | None:
    if type(e).__name__ in RAY_LOST_TYPES or (isinstance(e, ConnectionError) and "GCS" in str(e)):
        return ray_lost(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
    if not isinstance(e, OSError) or e.errno is None:
        return None
    path = e.filename or "the results folder"
    why = e.strerror or os.strerror(e.errno)
    if e.errno in DISK_FULL:
        return SweepFault(
            EXIT_NOT_WRITABLE,
            f"disk full: cannot write {path} ({why})",
            "free space on that disk (or pass --results on another), then re-run the same "
            "command to resume",
        )
    if e.errno in NO_WRITE:
        return SweepFault(
            EXIT_NOT_WRITABLE,
            f"cannot write {path}: {why} (the results folder is not writable)",
            "make it writable (or pass --results with a writable folder), then re-run the "
            "same command",
        )
    if e.errno in NOT_A_FOLDER:
        return SweepFault(
            EXIT_NOT_WRITABLE,
            f"{path}: a file where a folder is expected ({why})",
            "pass --results with a folder, or move the file away, then re-run",
        )
    return None


def ray_lost(cause: str) -> SweepFault:
    return SweepFault(
        EXIT_RAY_LOST,
        f"lost the Ray head ({cause})",
        "restart the Ray cluster (or run without --address for a local Ray), then re-run "
        "the same command to resume",
    )


def counts(where: Where) -> str:
    """``7 of 24 recorded`` (the records written are complete), or what is known."""
    if where.plan is None or where.sweep_dir is None or where.recorded is None:
        return "nothing was run"
    try:
        n = where.recorded()
    except Exception:  # the folder cannot be read either: say what is planned
        return f"{where.plan.n_trainings} planned; the records could not be counted"
    return f"{n} of {where.plan.n_trainings} recorded (every record written is complete)"


def end(err: BaseException, where: Where) -> int:
    """Print the one ``error:`` line of a fault, mark ``progress.json``, return its code;
    anything that is not a fault is raised again (a bug keeps its traceback)."""
    fault = err if isinstance(err, SweepFault) else classify(err)
    if fault is None:
        raise err
    line = f"error: {fault.what}; {counts(where)}; {fault.todo}"
    print(line, file=sys.stderr, flush=True)
    mark_ended(where.sweep_dir, line, fault.code)
    return fault.code


def mark_ended(sweep_dir: Path | None, line: str, code: int) -> None:
    """``progress.json`` says the run ended, how and with which code (best effort: on a
    full disk this write fails too, and the file keeps what it last said)."""
    from datetime import UTC, datetime

    from sweep_engine.status import read_progress, write_progress

    progress = read_progress(sweep_dir) if sweep_dir is not None else None
    if progress is None or sweep_dir is None:
        return
    now = datetime.now(UTC).isoformat(timespec="seconds")
    progress.update(phase="ended", running=[], error=line, exit_code=code, updated_at=now)
    try:
        write_progress(sweep_dir, progress, final=True)
    except OSError:
        pass


class RayHeadWatch:
    """``with RayHeadWatch(where):`` a daemon thread that, once this process joined Ray,
    connects to the head's GCS port every ``every`` seconds; when it stayed unreachable for
    ``grace`` seconds the sweep ends here: the ``error:`` line, ``progress.json``, the lock
    file removed, exit ``EXIT_RAY_LOST``. Ray's own client would otherwise end the process
    at ``RAY_RECONNECT_S`` with a log line and exit code 1."""

    def __init__(self, where: Where | None, every: float = 1.0) -> None:
        self.where, self.every = where or Where(Path(".")), every
        try:
            ray_s = float(os.environ.get(RECONNECT_ENV, RAY_RECONNECT_S))
        except ValueError:
            ray_s = RAY_RECONNECT_S
        self.grace = max(1.0, ray_s / 2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vflsweep-ray-head", daemon=True)

    def __enter__(self) -> RayHeadWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        ray = sys.modules.get("ray")
        head: tuple[str, int] | None = None
        since: float | None = None
        while not self._stop.wait(self.every):
            if head is None:
                if ray is None or not ray.is_initialized():
                    ray = sys.modules.get("ray")
                    continue
                host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
                head = (host, int(port))
            if _answers(*head):
                since = None
                continue
            since = time.monotonic() if since is None else since
            if time.monotonic() - since >= self.grace and not self._stop.is_set():
                where = f"{head[0]}:{head[1]}"
                self._lost(f"its GCS at {where} refused connections for {self.grace:.0f}s")

    def _lost(self, cause: str) -> None:
        code = end(ray_lost(cause), self.where)
        lock = self.where.lock
        if lock is not None:
            lock.path.unlink(missing_ok=True)  # the kernel drops the lock itself at exit
        os._exit(code)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False
