"""``vflsweep ui``: a real MLflow UI process on 127.0.0.1 that answers, then stops, with every
process it started, on Ctrl-C, SIGTERM and SIGHUP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from analysis.tracking import client_for, default_uri
from sweep_engine.ui import command, environment


def test_command_is_local_with_one_worker_and_no_job_workers(tmp_path: Path) -> None:
    cmd = command("sqlite:////x/mlflow.db", 5123, tmp_path / "mlartifacts")
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--workers") + 1] == "1"
    assert cmd[cmd.index("--default-artifact-root") + 1].startswith("file://")
    assert environment()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"


def test_no_store_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sweep_engine.vflsweep", "ui", "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "no MLflow store" in done.stderr


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a process, read by the test itself (not with
    ``sweep_engine.ui``'s helpers, which are what is under test); None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _tree(root: int) -> dict[int, int]:
    """The live descendants of ``root``, pid -> start time (the start time tells them from
    a later process that reuses a pid)."""
    stats = {int(e.name): _stat(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit()}
    found: dict[int, int] = {}
    parents = {root}
    while parents:
        children = {pid: st for pid, st in stats.items() if st and st[0] in parents}
        found.update({pid: st[2] for pid, st in children.items() if st[1] != "Z"})
        parents = set(children) - parents
    return found


def _running(tree: dict[int, int]) -> dict[int, int]:
    return {pid: t for pid, t in tree.items() if (st := _stat(pid)) and st[1] != "Z" and st[2] == t}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _as_from_a_terminal() -> None:
    """The child's stop signals at their defaults, as a terminal starts a command: a test
    run under ``nohup`` (or as a background job) would hand it SIGHUP (SIGINT) ignored;
    ``vflsweep ui`` keeps an ignored SIGHUP ignored on purpose, as ``nohup`` promises."""
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def _as_a_background_job() -> None:
    """The child's SIGINT ignored, as a shell starts ``vflsweep ui &`` from a script."""
    _as_from_a_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _launch(
    results: Path, preexec: Callable[[], None] = _as_from_a_terminal
) -> subprocess.Popen[str]:
    """``vflsweep ui`` started as a real process in a session of its own (as from a
    terminal, or as ``preexec`` sets its signals) over a real store with one sweep; not
    waited for."""
    client_for(default_uri(results)).create_experiment("demo")
    return subprocess.Popen(
        [sys.executable, "-m", "sweep_engine.vflsweep", "ui", "--results", str(results),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=preexec,
    )  # fmt: skip


def _port_free(url: str) -> bool:
    """Whether nothing listens on ``url``'s port any more: a new server can bind it.

    ``SO_REUSEADDR`` as servers set it (uvicorn does): the connections ``_answers`` made
    may linger in TIME_WAIT there, which only a plain ``bind`` would take for a listener."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", int(url.rsplit(":", 1)[1])))
        except OSError:
            return False
        return True


@contextmanager
def _ui(
    results: Path, proc: subprocess.Popen[str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``vflsweep ui`` (``proc``, or one launched now), once it printed its URL; killed with
    everything it started if a test fails."""
    proc = _launch(results) if proc is None else proc
    seen: dict[int, int] = {}
    try:
        url = None
        deadline = time.monotonic() + 240
        assert proc.stdout is not None
        while time.monotonic() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("MLflow UI: "):
                url = line.split()[2]
        assert url is not None and url.startswith("http://127.0.0.1:"), url
        seen = _tree(proc.pid)
        yield proc, url
    finally:
        for pid in _running(seen | _tree(proc.pid)):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_ui_answers_then_stops_with_its_whole_process_tree(tmp_path: Path) -> None:
    """Each way a UI is stopped, three UIs at once (their start-ups, an MLflow import each,
    overlap): Ctrl-C (the terminal signals the foreground group), kill PID (a service
    manager) and SIGHUP (the terminal closed, ssh dropped)."""
    cases = [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, False)]
    with ExitStack() as stack:
        launched = [(sig, to_group, _launch(tmp_path / sig.name)) for sig, to_group in cases]
        for _, _, started in launched:  # one never reached (a failure before it) is killed
            stack.callback(lambda p=started: p.poll() is None and os.killpg(p.pid, signal.SIGKILL))
        for sig, to_group, started in launched:
            proc, url = stack.enter_context(_ui(tmp_path / sig.name, started))
            assert _answers(url)
            tree = _tree(proc.pid)  # mlflow ui, the uvicorn it runs, and any worker of theirs
            assert tree, "vflsweep ui started no server process"
            (os.killpg if to_group else os.kill)(proc.pid, sig)
            assert proc.wait(timeout=60) == 0, sig.name
            # the command returns only once the server is gone: nothing of it may be left
            assert _running(tree) == {}, f"still running after {sig.name}: {_running(tree)}"
            assert not _answers(url)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_kill_int_stops_a_ui_started_as_a_background_job(tmp_path: Path) -> None:
    """Issue 63: a shell starts a background job with SIGINT ignored; ``kill -INT PID`` must
    still stop the UI as Ctrl-C does, with its server, and free the port."""
    with _ui(tmp_path, _launch(tmp_path, _as_a_background_job)) as (proc, url):
        assert _answers(url)
        tree = _tree(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert _running(tree) == {}, f"still running after kill -INT: {_running(tree)}"
        assert not _answers(url)
        assert _port_free(url), f"{url}: its port is still taken"
