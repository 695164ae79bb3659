"""``vflsweep ui``: MLflow's UI over a results folder, on 127.0.0.1, started so that it answers.

Why not just ``mlflow server``: with its defaults on a 2-core machine it starts four web
workers and a pool of background job workers (for GenAI scorers, which a sweep never uses);
they fought for the CPUs and logged "Child process died" without ever answering. Here: one
web worker, no job execution, bound to 127.0.0.1 only, and the URL printed once ``/health``
answers, so the user is not left guessing whether it is still starting.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from analysis.tracking import default_uri

START_TIMEOUT_S = 180.0  # a cold start on a busy 2-core machine took 45 s


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vflsweep ui", description="Start MLflow's UI for a results folder on 127.0.0.1."
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


def main(argv: list[str] | None = None) -> int:
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
    url = f"http://127.0.0.1:{port}"
    print(f"starting MLflow's UI for {uri} (a cold start can take a minute)...", flush=True)
    log_path = results / "mlflow-ui.log"  # its request log: a pipe nobody reads would fill
    log = open(log_path, "wb")  # closed in finally, after the process
    proc = subprocess.Popen(
        command(uri, port, results / "mlartifacts"),
        env=environment(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C here stops the whole group below, once
    )
    try:
        if not wait_until_up(url, proc, START_TIMEOUT_S):
            tail = log_path.read_text(errors="replace")[-2000:]
            print(f"error: MLflow's UI did not answer at {url}; its log:\n{tail}", file=sys.stderr)
            return 1
        print(f"MLflow UI: {url}  (Ctrl-C stops it)", flush=True)
        proc.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()
