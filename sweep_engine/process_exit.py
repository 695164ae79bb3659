"""How a command-line process ends once ``main`` has returned: quickly, its work written.

Why its own module: ``sweep.py``, ``vflsweep`` and the tests end processes this way, and
``cli.py`` (which re-exports ``exit_process``) is about running a sweep.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """End a command-line process with ``code`` once ``main`` has returned.

    Why not ``sys.exit``: after torch, Ray and Tune were imported, Python's finalization
    (module teardown and a last collection over ~10^6 objects) takes 1-1.5 s here and
    writes nothing: every record, manifest and MLflow run was written before ``main``
    returned. The ``atexit`` handlers (Ray's shutdown among them) still run, and the
    standard streams are flushed. Only the ``__main__`` entry points call this; ``main``
    itself returns, for tests and callers in-process."""
    try:
        try:
            stop_autoscaler_monitor()
        except Exception:  # only a speed-up: Ray's shutdown stops it anyway, 1 s later
            pass
        atexit._run_exitfuncs()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing left to say there
                pass
        os._exit(code)


def stop_autoscaler_monitor() -> None:
    """Kill the autoscaler monitor of the local Ray this process started, before
    ``ray.shutdown`` asks it to stop: it ignores SIGTERM, and the shutdown waits 1 s for
    it (of its 1.4 s here) before it kills it anyway. A local Ray has nothing for it to
    scale; Linux only (``/proc``), elsewhere the shutdown waits as before."""
    if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
        return
    me, proc = str(os.getpid()), Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2 :].split()[1] != me:
                continue  # not a child of this process: another Ray's, or not Ray's
            if b"autoscaler/_private/monitor.py" in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not a process folder
