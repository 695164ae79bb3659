"""Where the driver's memory goes, by trainings written: an opt-in diagnostic.

Why: a sweep of many tiny trainings must keep the driver's memory flat, and RSS alone
cannot tell Python objects kept per training from allocator fragmentation or from
Ray's C++ side. ``VFLSWEEP_TRACEMALLOC=<path>`` makes the driver's ``Progress``
callback start ``tracemalloc`` and, every ``VFLSWEEP_TRACEMALLOC_EVERY`` trainings
(default 1000), append one JSON line to ``<path>``: trainings written, RSS, the traced
Python heap, the allocation sites that grew most since the first checkpoint, and the
object counts by type that grew most. Off (the default), it costs one dict lookup.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

ENV, EVERY_ENV = "VFLSWEEP_TRACEMALLOC", "VFLSWEEP_TRACEMALLOC_EVERY"


def status_kib(keys: tuple[str, ...] = ("VmRSS",), pid: int | str = "self") -> dict[str, int]:
    """Fields of a process's ``/proc/<pid>/status`` in KiB (Linux; empty elsewhere or once
    it exited): ``RssAnon`` is the heap, ``RssShmem`` pages of Ray's object store mapped."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in keys:
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


class MemTrace:
    """Checkpoints of the driver's memory against trainings written (see module doc)."""

    def __init__(self, path: str, every: int) -> None:
        self.path, self.every, self.next_at = Path(path), every, every
        self.first: tracemalloc.Snapshot | None = None
        self.first_types: Counter[str] = Counter()
        tracemalloc.start(12)

    def tick(self, done: int) -> None:
        """Write a checkpoint once ``done`` reached the next multiple of ``every``."""
        if done < self.next_at:
            return
        self.next_at = (done // self.every + 1) * self.every
        gc.collect()
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        types = Counter(type(o).__name__ for o in gc.get_objects())
        if self.first is None:
            self.first, self.first_types = snap, types
        traced, _ = tracemalloc.get_traced_memory()
        line = {
            "done": done,
            **status_kib(("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads")),
            "traced_kib": traced // 1024,
            "tracemalloc_own_kib": tracemalloc.get_tracemalloc_memory() // 1024,
            **_native(),
            "grew": _grew(snap, self.first),
            "types_grew": (types - self.first_types).most_common(15),
        }
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
        "keepcost".split()
    ]


def _native() -> dict[str, int]:
    """Memory outside the Python heap: glibc malloc's bytes in use and held free (so
    fragmentation shows apart from live C/C++ objects), Arrow's own pool."""
    out: dict[str, int] = {}
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
        out["malloc_in_use_kib"] = (info.uordblks + info.hblkhd) // 1024
        out["malloc_free_held_kib"] = info.fordblks // 1024
    except (OSError, AttributeError):
        pass
    if "pyarrow" in sys.modules:
        out["arrow_kib"] = sys.modules["pyarrow"].total_allocated_bytes() // 1024
    return out


def _grew(snap: tracemalloc.Snapshot, first: tracemalloc.Snapshot) -> list[dict[str, Any]]:
    """The 12 allocation sites (by traceback) whose live bytes grew most since ``first``."""
    out = []
    for stat in snap.compare_to(first, "traceback")[:12]:
        frames = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in stat.traceback]
        out.append({"kib": stat.size_diff // 1024, "count": stat.count_diff, "at": frames[-6:]})
    return out


def from_env() -> MemTrace | None:
    """A ``MemTrace`` when ``VFLSWEEP_TRACEMALLOC`` is set, else None."""
    path = os.environ.get(ENV)
    if not path:
        return None
    return MemTrace(path, int(os.environ.get(EVERY_ENV, "1000")))
