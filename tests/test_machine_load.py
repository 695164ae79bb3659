"""Other work's share of the machine (``sweep_engine/machine_load.py``): CPU time of this
process tree is ours, a detached process's is other work's; the heartbeat says a busy
machine is busy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweep_engine.machine_load import BUSY_SHARE, LoadWatch, busy_text, tree_jiffies

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def _jiffies(pid: int) -> int:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def test_a_child_is_ours_and_a_detached_process_is_not() -> None:
    # measured in a fresh process: this one's own descendants (a Ray this test process
    # started for another test) may end meanwhile and take their time out of its tree
    counted = (
        "import os, subprocess, sys\n"
        "from sweep_engine.machine_load import tree_jiffies\n"
        "before = tree_jiffies(os.getpid())\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(s=0.6)!r}], check=True)\n"
        "print(tree_jiffies(os.getpid()) - before)\n"
    )  # the burner is a child: reaped into the fresh process's cutime
    done = subprocess.run([sys.executable, "-c", counted], check=True, capture_output=True)
    ours = int(done.stdout)
    tick = os.sysconf("SC_CLK_TCK")
    assert ours >= 0.5 * tick, ours  # its 0.6 CPU-s (and the interpreter's start) counted
    # a double fork: the burner's parent exits at once, so init (or a subreaper) adopts it
    pid_file = Path(f"/tmp/vflsweep-burner-{os.getpid()}")
    detach = (
        "import os, subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {BURN.format(s=1.5)!r}],"
        " start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
    )
    subprocess.run([sys.executable, "-c", detach], check=True)
    burner = int(pid_file.read_text())
    pid_file.unlink()
    watch = LoadWatch()
    start, used_before = tree_jiffies(os.getpid()), _jiffies(burner)
    time.sleep(1.0)
    burned = _jiffies(burner) - used_before  # what the detached burner used meanwhile
    assert burned >= 0.3 * tick, burned  # it ran (at least ~a third of a core)
    assert tree_jiffies(os.getpid()) - start < 0.3 * burned  # and none of it is ours
    share = watch.sample()
    assert share is not None and share > 0.0  # other work took some of the machine
    os.kill(burner, signal.SIGTERM)  # not ours to wait for


def test_the_heartbeat_names_a_busy_machine() -> None:
    from sweep_engine.heartbeat import Tracker

    assert busy_text(None, 2, True) == ""  # off Linux: nothing said
    assert busy_text(BUSY_SHARE / 2, 2, True) == ""
    text = busy_text(0.5, 2, True)
    assert "other work took 50% of its 2 CPUs" in text and "measured rate" in text
    assert "plan assumed a quiet one" in busy_text(0.5, 2, False)
    tracker = Tracker(4)
    tracker.others = 0.6
    assert "the machine is busy: other work took 60%" in tracker.heartbeat_line(time.monotonic())
    assert tracker.snapshot(time.monotonic())["others_cpu_share"] == 0.6
