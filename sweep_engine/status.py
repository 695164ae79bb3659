"""``vflsweep status RESULTS/SWEEP``: what a running or finished sweep has done, from its folder.

Read from files only, never from Ray (a sweep's Ray may be a cluster this shell cannot
reach, or gone): planned trainings from ``manifest.json`` (written as the run starts),
done and failed from the records (``RecordSink.statuses``), whether a driver runs from the
kernel lock on ``sweep.lock`` (``lock.py``; read from ``/proc/locks``, never taken: a
status probe holding it for a moment could make a starting driver refuse to run), and what
is running with an ETA from ``progress.json``, which the driver rewrites atomically every
few seconds (``heartbeat.Tracker.save``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from sweep_engine.lock import LOCK_NAME, holder_of
from sweep_engine.machine_load import BUSY_SHARE
from sweep_engine.words import duration, plural
from trainables.results.manifest import MANIFEST, of_planned, read_manifest

PROGRESS = "progress.json"
PHASES = {  # heartbeat.Tracker.phase, when no trial runs
    "starting": "starting Ray",
    "running": "no trial at the moment (starting one, or between trials)",
    "ended": "trainings over; finishing (MLflow sync, summary)",
    "stopped": "stopping",
}
EXIT_BAD_INPUT = 2


class NotASweepError(ValueError):
    """The folder does not exist or holds no sweep."""


# Sweep folders whose run in this process ended on a fault (``fault_exits.mark_ended``):
# a heartbeat or a finished training's save must not write "running" over that last word
# between it and the process's exit. A new run in the process opens the folder again.
_ENDED: set[Path] = set()
_WRITING = threading.Lock()


def write_progress(sweep_dir: Path, snapshot: dict[str, Any], final: bool = False) -> Path:
    """``<sweep>/progress.json``, atomically (a reader sees the old or the new file), one
    writer at a time; ``final``: the run's last word, after which this process writes no
    other snapshot of the folder until ``reopen``."""
    from sweep_engine.parts import write_json_atomic

    path, key = sweep_dir / PROGRESS, Path(os.path.abspath(sweep_dir))
    with _WRITING:
        if key in _ENDED and not final:
            return path
        write_json_atomic(path, snapshot, indent=None)
        if final:
            _ENDED.add(key)
    return path


def reopen(sweep_dir: Path) -> None:
    """A new run of the folder in this process: its snapshots are written again."""
    with _WRITING:
        _ENDED.discard(Path(os.path.abspath(sweep_dir)))


def read_progress(sweep_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((sweep_dir / PROGRESS).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lock_held(sweep_dir: Path) -> bool | None:
    """Whether a live driver holds the sweep's lock; None when this machine cannot tell
    (no ``/proc/locks`` and a holder on another host). A lock file left by a killed
    driver is not held: the kernel dropped its lock with the process."""
    path = sweep_dir / LOCK_NAME
    try:
        st = path.stat()
    except FileNotFoundError:
        return False  # a driver removes it when it ends
    holder = holder_of(path)
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        table = None
    if table is not None:
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in table.splitlines():
            fields = line.split()
            if len(fields) < 6 or fields[1] != "FLOCK":
                continue
            # the device as the kernel names it, or the inode and the holder's pid (an
            # overlay file system may name another device)
            same_inode = fields[5].rsplit(":", 1)[-1] == str(st.st_ino)
            if fields[5] == dev or (same_inode and fields[4] == str(holder.get("pid"))):
                return True
        return False
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return None


def _is_sweep(sweep_dir: Path) -> bool:
    names = (MANIFEST, "records", PROGRESS, LOCK_NAME)
    return any((sweep_dir / name).exists() for name in names)


def _not_a_sweep(sweep_dir: Path) -> NotASweepError:
    if not sweep_dir.exists():
        return NotASweepError(f"{sweep_dir}: no such folder")
    if not sweep_dir.is_dir():
        return NotASweepError(f"{sweep_dir}: not a folder")
    inner = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir() and _is_sweep(p))
    hint = f"; sweeps in it: {', '.join(inner)}" if inner else ""
    return NotASweepError(
        f"{sweep_dir} is not a sweep folder (no {MANIFEST}, records/, {PROGRESS} or {LOCK_NAME}); "
        f"give RESULTS/SWEEP, the folder a sweep writes{hint}"
    )


def status(sweep_dir: Path) -> dict[str, Any]:
    """What the sweep in ``sweep_dir`` has done (see the module doc); NotASweepError when
    the folder is missing or holds no sweep."""
    from sweep_engine.sink import RecordSink

    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir() or not _is_sweep(sweep_dir):
        raise _not_a_sweep(sweep_dir)
    manifest = read_manifest(sweep_dir) or {}
    progress = read_progress(sweep_dir) or {}
    statuses, damaged = RecordSink(sweep_dir).verified_statuses()
    statuses, unplanned = of_planned(statuses, manifest)  # verified, of planned trainings
    done = sum(1 for s in statuses.values() if s in ("ok", "stopped"))  # stopped: finished
    failed = len(statuses) - done
    planned = (manifest.get("plan") or {}).get("trainings", progress.get("planned"))
    left = None if planned is None else max(int(planned) - done - failed, 0)
    running = lock_held(sweep_dir)
    out: dict[str, Any] = {
        "sweep": manifest.get("space", sweep_dir.name),
        "path": str(sweep_dir),
        "planned": planned,
        "done": done,
        "failed": failed,
        "left": left,
        "running": running,
        "damaged": {str(path): why for path, why in damaged.items()},
        "unplanned": unplanned,
        "state": _state(running, left, failed, len(damaged)),
        "holder": holder_of(sweep_dir / LOCK_NAME) if running else None,
        "now": [],
        "eta_s": 0.0 if left == 0 else None,
        "updated_at": progress.get("updated_at"),
    }
    if running:
        # a progress.json of an earlier run (another pid) says nothing of this one yet
        ours = progress and progress.get("pid") == out["holder"].get("pid")
        out["phase"] = progress.get("phase") if ours else "starting"
        if ours:
            out["now"] = progress.get("running", [])
            out["eta_s"] = _eta_now(progress)
            out["eta_from"] = progress.get("eta_from")
            out["others_cpu_share"] = progress.get("others_cpu_share")
    return out


def _state(running: bool | None, left: int | None, failed: int, damaged: int) -> str:
    if running:
        return "running"
    if damaged:  # never "finished" while a file's numbers cannot be trusted
        return "damaged"
    if left == 0:
        return "finished" if not failed else "finished with failures"
    return "stopped" if running is False else "unknown"


def _eta_now(progress: dict[str, Any]) -> float | None:
    """The driver's ETA, less the time since it wrote it."""
    eta = progress.get("eta_s")
    if eta is None:
        return None
    try:
        age = time.time() - datetime.fromisoformat(progress["updated_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        age = 0.0
    return max(float(eta) - max(age, 0.0), 0.0)


def status_lines(sweep_dir: Path) -> list[str]:
    """``status(sweep_dir)`` for a person."""
    s = status(sweep_dir)
    head = f"sweep {s['sweep']} ({s['path']}): {s['state']}"
    holder = s["holder"] or {}
    if holder:
        head += f" (pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started')})"
    planned = "unknown" if s["planned"] is None else str(s["planned"])
    left = "unknown" if s["left"] is None else str(s["left"])
    lines = [
        head,
        f"  trainings: {planned} planned, {s['done']} done, {s['failed']} failed, {left} left",
    ]
    for run in s["now"]:
        size = f" of {plural(run['trainings'], 'training')}" if run.get("kind") == "pack" else ""
        now = f": now {run['now']}" if run.get("now") else ""
        kind, since = run.get("kind", "trial"), duration(run["for_s"])
        lines.append(f"  running: {kind}{size} for {since}{now}")
    if s["running"] and not s["now"]:
        lines.append(f"  running: {PHASES.get(s.get('phase') or '', 'no trial')}")
    if s["running"]:
        eta = s["eta_s"]
        basis = " (the plan's estimate)" if s.get("eta_from") == "plan" else ""
        lines.append("  ETA: no estimate yet" if eta is None else f"  ETA: ~{duration(eta)}{basis}")
        others = s.get("others_cpu_share")
        if others is not None and others >= BUSY_SHARE:
            lines.append(f"  the machine is busy: other work takes {others:.0%} of its CPUs")
    elif s["left"]:
        lines.append(f"  {plural(s['left'], 'training')} left: re-run the sweep to resume")
    if s["failed"] and not s["running"]:
        lines.append("  failed trainings have status='error' records; a re-run retries them")
    for path, why in s["damaged"].items():
        lines.append(f"  damaged: {path}: {why}; not counted (a re-run sets it aside, redoes it)")
    if s["unplanned"]:
        lines.append(
            f"  {plural(s['unplanned'], 'record file')} of trainings this plan does not have: "
            "not counted"
        )
    return lines


def folder_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser of a command that reads one sweep folder: ``RESULTS/SWEEP [--json]``."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("sweep", metavar="RESULTS/SWEEP", help="the sweep's folder, e.g. results/smoke")
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


def build_parser() -> argparse.ArgumentParser:
    return folder_parser(
        "vflsweep status", "What a running or finished sweep has done, read from its folder."
    )


def main(argv: list[str] | None = None) -> int:
    """0 with the status printed; 2 for a missing folder or one that holds no sweep."""
    args = build_parser().parse_args(argv)
    try:
        if args.json:
            print(json.dumps(status(Path(args.sweep)), default=str))
        else:
            print("\n".join(status_lines(Path(args.sweep))))
    except NotASweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
