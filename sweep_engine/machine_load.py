"""How much of the machine other work takes while a sweep runs (issue 45).

Why: a plan's estimate assumes the machine is the sweep's. On a shared 2-core machine a
test suite beside a sweep made it run 1.5-2x slower than planned, and the heartbeat could
not tell that from a bad estimate. ``LoadWatch`` reads ``/proc`` (Linux; elsewhere it
reports nothing): the CPU time all processes used since the last sample, less the time
this process tree used (the driver, and Ray's GCS, raylet and workers it started, with
the time of those that ended and were reaped). What is left is other work's share of the
machine's CPU capacity. No psutil: it is not a dependency, and ``/proc`` holds all of it.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
BUSY_SHARE = 0.25  # other work over a quarter of the machine's CPUs: say the machine is busy


def machine_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU jiffies of the whole machine since boot, or None off Linux."""
    try:
        fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _stat(pid: str) -> tuple[int, int] | None:
    """(parent pid, utime + stime + cutime + cstime) of one process, None if it is gone."""
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return int(rest[1]), sum(int(v) for v in rest[11:15])


def tree_jiffies(root: int) -> int:
    """CPU jiffies used by ``root`` and every process under it (ended children included
    once reaped: their time is in their parent's cutime and cstime)."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (got := _stat(entry.name)) is not None:
            stats[int(entry.name)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo += children.get(pid, [])
    return total


class LoadWatch:
    """``sample()``: other work's share of the machine's CPU capacity since the last
    sample (0: none, 1: every CPU busy with it), or None where ``/proc`` is missing."""

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self._last = self._read()

    def _read(self) -> tuple[int, int, int] | None:
        machine = machine_jiffies()
        if machine is None:
            return None
        return machine[0], machine[1], tree_jiffies(self.root)

    def sample(self) -> float | None:
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[1] <= last[1]:
            return None
        others = (now[0] - last[0]) - (now[2] - last[2])
        return min(1.0, max(0.0, others / (now[1] - last[1])))


def busy_text(others: float | None, cpus: int, from_rate: bool) -> str:
    """The heartbeat's words for a busy machine; empty below ``BUSY_SHARE``."""
    if others is None or others < BUSY_SHARE:
        return ""
    then = "the ETA follows the measured rate" if from_rate else "the plan assumed a quiet one"
    return (
        f"; the machine is busy: other work took {others:.0%} of its {cpus} CPUs "
        f"lately, so this sweep runs slower ({then})"
    )
