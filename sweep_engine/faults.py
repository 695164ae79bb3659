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
  finished, so the retry must start there (``grid.py``).

Unset (or empty), nothing here does anything; a malformed value is a ``ConfigError``
raised before anything runs (``check``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import NoReturn

import pyarrow as pa
import pyarrow.parquet as pq

from trainables.errors import ConfigError

FAULT_ENV = "VFLSWEEP_FAULT"
FAULTS = ("kill_during_write", "kill_during_compaction", "fail_training")

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
