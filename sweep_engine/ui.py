"""``vflsweep ui``: MLflow's UI over a results folder, on 127.0.0.1, started so that it answers.

Why not just ``mlflow server``: with its defaults on a 2-core machine it starts four web
workers and a pool of background job workers (for GenAI scorers, which a sweep never uses);
they fought for the CPUs and logged "Child process died" without ever answering. Here: one
web worker, no job execution, bound to 127.0.0.1 only, and the URL printed once ``/health``
answers, so the user is not left guessing whether it is still starting.

Stopping: Ctrl-C, SIGTERM and SIGHUP alike end the server, its web worker and anything else
it started (its process group and its process tree), SIGKILL for what outlives a grace
period, and the command returns once none runs: the server runs in a session of its own
(so that the terminal's Ctrl-C reaches it once, through us), so nothing else would stop it.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from analysis.tracking import default_uri

START_TIMEOUT_S = 180.0  # a cold start on a busy 2-core machine took 45 s


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vflsweep ui",
        description="Start MLflow's UI for a results folder on 127.0.0.1 and print its URL "
        "once it answers; Ctrl-C, SIGTERM or SIGHUP stops it with every process it started.",
    )
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument(
        "--mlflow-uri", default=None, help="a backend store (default sqlite:///<results>/mlflow.db)"
    )
    p.add_argument("--port", type=int, default=5000, help="port (default 5000, else a free one)")
    return p


def free_port(preferred: int) -> int:
    """``preferred`` if nothing listens there, else (or for 0) one the OS picks."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(uri: str, port: int, artifacts: Path) -> list[str]:
    """The ``mlflow ui`` command line (one web worker, local only)."""
    return [
        sys.executable, "-m", "mlflow", "ui",
        "--backend-store-uri", uri,
        # runs whose experiment has no location of its own (MLflow's Default experiment)
        # keep artifacts in the results folder, not in ./mlruns wherever the UI started
        "--default-artifact-root", artifacts.resolve().as_uri(),
        "--host", "127.0.0.1", "--port", str(port),
        "--workers", "1",
    ]  # fmt: skip


def environment() -> dict[str, str]:
    """MLflow's background job workers off: they serve GenAI scorers, not sweep runs, and on
    a small machine they starve the web worker (the "Child process died" loop)."""
    env = dict(os.environ)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    return env


def wait_until_up(url: str, proc: subprocess.Popen, timeout_s: float) -> bool:
    """True once ``/health`` answers 200; False if the process died or time ran out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


# What stops the UI: Ctrl-C, and what a service manager (SIGTERM) or a closed terminal
# (SIGHUP) sends. Python's defaults for the last two end this process at once, skipping the
# clean-up, and the server, in a session of its own, went on answering.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The one a caller may have ignored on purpose: ``nohup vflsweep ui &`` outlives its terminal,
# as ``nohup`` promises. An ignored SIGINT is no such choice: a shell hands it to every
# background job (``vflsweep ui &`` in a script), and ``kill -INT PID`` then did nothing.
KEPT_IF_IGNORED = (signal.SIGHUP,)
STOP_GRACE_S = 20.0  # SIGTERM, then SIGKILL for what still runs after this long


class StopSignals:
    """Ctrl-C, SIGTERM and SIGHUP all raise ``KeyboardInterrupt``, so that one clean-up path
    stops the server, but only while armed: one that comes while the server is being
    started (a ``Popen`` cut short there would leave a server nobody stops) or stopped (a
    second Ctrl-C must not cut the clean-up short) is held, and raised by ``arm``.

    Why not block the signals meanwhile: a blocked mask is inherited through ``exec``,
    and the server would then ignore the SIGTERM meant to stop it. Off the main thread,
    where Python installs no handler, nothing changes. An ignored SIGHUP stays ignored
    (``nohup``); an ignored SIGINT or SIGTERM is handled all the same."""

    def __init__(self) -> None:
        self.armed = False
        self.pending = False
        self.previous: dict[signal.Signals, Any] = {}  # signal.signal's: callable, int, None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {
                sig: signal.signal(sig, self._on_signal)
                for sig in STOP_SIGNALS
                # an ignored SIGINT (a background job's) is handled all the same, so that
                # ``kill -INT`` stops the UI exactly as Ctrl-C does (``KEPT_IF_IGNORED``)
                if sig not in KEPT_IF_IGNORED or signal.getsignal(sig) is not signal.SIG_IGN
            }
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        self.pending = True

    def arm(self) -> None:
        """From now on a stop signal interrupts; one held meanwhile does so at once."""
        self.armed = True
        if self.pending:
            self.armed = False
            raise KeyboardInterrupt

    def disarm(self) -> None:
        self.armed = False


def _stat(pid: int) -> tuple[int, int, str, int] | None:
    """(parent pid, process group, state, start time) from ``/proc/<pid>/stat``; None
    when the process is gone (or there is no ``/proc``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": comm may hold spaces
    return int(fields[1]), int(fields[2]), fields[0], int(fields[19])


def family(root: int, root_alive: bool = True) -> dict[int, int]:
    """The live processes of ``root``'s tree and of its process group, pid -> start time.

    Why both: the server's workers inherit its group, which ``killpg`` reaches, but a
    worker that starts a session of its own leaves the group while staying a descendant.
    The start time tells a process from a later one that reuses its pid; once ``root`` is
    reaped (``root_alive`` False) its pid may be another's, so only its group counts."""
    stats: dict[int, tuple[int, int, str, int]] = {}
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    members = {pid for pid, (_, group, _, _) in stats.items() if group == root}
    if root_alive:
        members.add(root)
    while more := {p for p, (parent, *_) in stats.items() if parent in members} - members:
        members |= more  # descendants, a generation at a time
    return {pid: stats[pid][3] for pid in members if pid in stats and stats[pid][2] != "Z"}


def _alive(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] != "Z" and stat[3] == started


def _signal_all(proc: subprocess.Popen[bytes], members: dict[int, int], sig: int) -> None:
    """``sig`` to the server's group (while the server is unreaped, its pid cannot name
    another group) and to each of ``members`` still running."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # it ended meanwhile
    for pid, started in members.items():
        if _alive(pid, started):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def stop_tree(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """End the server and every process it started: SIGTERM to its group and tree, then
    SIGKILL to whatever still runs after ``grace_s``. Returns once none runs (or SIGKILL
    had 10 s), so the port is free when the command ends."""
    members = family(proc.pid)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        _signal_all(proc, members, sig)
        members = _wait_gone(proc, members, wait_s)
        if proc.returncode is not None and not members:
            return


def _wait_gone(
    proc: subprocess.Popen[bytes], members: dict[int, int], wait_s: float
) -> dict[int, int]:
    """Wait up to ``wait_s`` for the server and ``members`` (and any process they started
    meanwhile) to end; returns those still running."""
    deadline = time.monotonic() + wait_s
    while True:
        proc.poll()  # reaps it: unreaped, the server would stay a zombie in its group
        found = family(proc.pid, root_alive=proc.returncode is None)
        members = {pid: t for pid, t in (members | found).items() if _alive(pid, t)}
        if (proc.returncode is not None and not members) or time.monotonic() >= deadline:
            return members
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """``vflsweep ui``: 0 once stopped (Ctrl-C, SIGTERM, SIGHUP), 1 if the server never
    answered, 2 without a store."""
    args = build_parser().parse_args(argv)
    results = Path(args.results)
    uri = args.mlflow_uri or default_uri(results)
    if uri.startswith("sqlite:") and not (results / "mlflow.db").exists():
        print(
            f"error: no MLflow store at {results / 'mlflow.db'}; run a sweep with "
            f"--results {results} first, or pass --results/--mlflow-uri",
            file=sys.stderr,
        )
        return 2
    port = free_port(args.port)
    print(f"starting MLflow's UI for {uri} (a cold start can take a minute)...", flush=True)
    with StopSignals() as stop:
        return serve(uri, port, results, stop)


def serve(uri: str, port: int, results: Path, stop: StopSignals) -> int:
    """Start the server, print its URL once it answers, wait until it ends or a stop
    signal comes; then end it and every process it started (``stop_tree``).

    ``stop`` is armed only around the wait, and disarmed in an inner ``finally``: a signal
    can then interrupt the wait, or that ``finally`` (caught below all the same), but
    never the clean-up, which runs once whatever came."""
    url = f"http://127.0.0.1:{port}"
    log_path = results / "mlflow-ui.log"  # its request log: a pipe nobody reads would fill
    log = open(log_path, "wb")  # closed in finally, after the process
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            command(uri, port, results / "mlartifacts"),
            env=environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            # its own session: the terminal's Ctrl-C and hangup reach only this process,
            # which then stops the server's whole group and tree below, once
            start_new_session=True,
        )
        try:
            stop.arm()
            if not wait_until_up(url, proc, START_TIMEOUT_S):
                tail = log_path.read_text(errors="replace")[-2000:]
                print(
                    f"error: MLflow's UI did not answer at {url}; its log:\n{tail}", file=sys.stderr
                )
                return 1
            print(f"MLflow UI: {url}  (Ctrl-C stops it)", flush=True)
            proc.wait()
            return 0
        finally:
            stop.disarm()
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (``StopSignals``)
        return 0
    finally:
        if proc is not None:
            stop_tree(proc, STOP_GRACE_S)
        log.close()
