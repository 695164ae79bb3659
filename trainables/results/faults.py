"""Fault injection for the reliability tests: inert unless ``VFLSWEEP_FAULT`` is set.

Why it exists: the claims that a killed driver loses and duplicates no record, and that a
failed pack resumes from the training that failed, are only believable if tests kill and
fail real processes at the worst moments. Why its own module: these hooks are test-only,
and the writers (``sink.py``, ``compaction.py``) and the pack trainable (``grid.py``)
should read as what they do in production, with one named call where a test may cut in.

``VFLSWEEP_FAULT=<fault>:N`` (N >= 1), one of:

- ``kill_during_write:N``: SIGKILL this process in the middle of its N-th record write,
  after half the file's bytes reached the temporary file (``sink.py``);
- ``kill_during_compaction:N``: SIGKILL it at the N-th point a compaction passes, counted
  over the process: (1) half a part's bytes in its temporary file (once per part written),
  (2) parts in place but no manifest, (3) manifest written but nothing removed, (4) half
  the folded files removed (``compaction.py``);
- ``fail_training:N``: a pack's first attempt fails once N - 1 of its trainings have
  finished, so the retry must start there (``grid.py``);
- ``disk_full:N``: the disk is full from this process's N-th record write on: each such
  write leaves half its bytes in the temporary file and raises ``OSError(ENOSPC)``, as a
  full disk does (``sink.py``; the tests run as root, where no quota or read-only mount
  can be set up, and a real full disk would starve everything else on the machine);
- ``kill_during_mlflow_sync:N``: SIGKILL this process at the N-th schema statement
  (``CREATE``/``ALTER``/``DROP TABLE``, ``CREATE INDEX``) MLflow runs while it creates a new
  sqlite store, about 330 in all: a first sync cut short (``analysis/tracking.py``).

Unset (or empty), nothing here does anything; a malformed value is a ``ConfigError``
raised before anything runs (``check``).
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import NoReturn

import pyarrow as pa
import pyarrow.parquet as pq

from trainables.errors import ConfigError

FAULT_ENV = "VFLSWEEP_FAULT"
FAULTS = (
    "kill_during_write",
    "kill_during_compaction",
    "fail_training",
    "disk_full",
    "kill_during_mlflow_sync",
)

_counts = {name: 0 for name in FAULTS}  # record writes / compaction points of this process


def check() -> tuple[str, int] | None:
    """(fault, N) from ``VFLSWEEP_FAULT``; None when unset; ConfigError when malformed."""
    value = os.environ.get(FAULT_ENV, "")
    if not value:
        return None
    name, _, count = value.partition(":")
    if name not in FAULTS or not count.isdigit() or int(count) < 1:
        raise ConfigError(
            f"{FAULT_ENV}={value!r} is not valid; allowed: "
            + ", ".join(f"{f}:N (N >= 1)" for f in FAULTS)
            + ", or unset"
        )
    return name, int(count)


def fault_at(name: str) -> int | None:
    """N when ``VFLSWEEP_FAULT`` is ``name:N``, else None."""
    fault = check()
    return fault[1] if fault is not None and fault[0] == name else None


def fault_now(name: str) -> bool:
    """Count one more ``name`` event; True when the fault says to die at this one."""
    _counts[name] += 1
    return _counts[name] == fault_at(name)


def write_half_and_die(table: pa.Table, tmp: Path) -> NoReturn:
    """Leave ``tmp`` holding half of a real Parquet file of ``table``, then SIGKILL this
    process at once (``kill_during_write``: what a power cut mid-write leaves)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    with open(tmp, "wb") as fh:
        fh.write(data[: len(data) // 2])
        fh.flush()
        os.fsync(fh.fileno())
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL cannot be caught")


def fault_from(name: str) -> bool:
    """Count one more ``name`` event; True from the N-th on (a full disk stays full)."""
    _counts[name] += 1
    at = fault_at(name)
    return at is not None and _counts[name] >= at


def write_half_and_fail(data: bytes, tmp: Path) -> NoReturn:
    """``disk_full``: half of ``data`` reaches ``tmp``, then the write fails as on a full
    disk (``OSError`` with ``errno.ENOSPC``, naming the file)."""
    with open(tmp, "wb") as fh:
        fh.write(data[: len(data) // 2])
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))


SCHEMA_STATEMENTS = ("CREATE TABLE", "ALTER TABLE", "DROP TABLE", "CREATE INDEX", "CREATE UNIQUE")


def arm_mlflow_store_kill() -> None:
    """``kill_during_mlflow_sync:N``: SIGKILL this process after the N-th schema statement
    any SQLAlchemy engine of it runs from now on (MLflow's migrations of a new store)."""
    if fault_at("kill_during_mlflow_sync") is None or _armed:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def after(conn: object, cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith(SCHEMA_STATEMENTS):
            if fault_now("kill_during_mlflow_sync"):
                os.kill(os.getpid(), signal.SIGKILL)

    event.listen(Engine, "after_cursor_execute", after)
    _armed.append(True)


_armed: list[bool] = []  # the listener is in place (once per process)
