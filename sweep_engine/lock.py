"""One driver per sweep folder: ``<results>/<sweep>/sweep.lock``.

Two drivers on the same sweep would both run the trainings neither has recorded yet and
race to clean each other's temporary files. The second one refuses instead (exit code 2),
naming the holder.

The lock is a kernel lock (``fcntl.flock``) on the lock file, held for the driver's life.
The kernel drops it when the holder dies, however it dies (SIGKILL, OOM, power cut of a
node sharing nothing), so a lock file left behind by a dead driver is *stale* and the next
driver takes it over, saying whose it was. The file's content (pid, host, start time,
command) is only for that message. ``flock`` works on local disks and on NFSv4; on a
shared file system without working locks, do not start the same sweep on two hosts.

The sweep folder itself is locked too (``flock`` on a descriptor of the directory), first:
a lock file deleted by hand is a new file to the next driver, which would lock it and redo
every training the holder is running; the folder's lock still holds. Where a directory
cannot be locked (some network file systems), the file's lock is the only one.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from trainables.errors import ConfigError

LOCK_NAME = "sweep.lock"


class SweepLockedError(ConfigError):
    """Another live driver holds the sweep's lock (the CLI maps ConfigError to exit 2)."""


def holder_of(path: Path) -> dict[str, Any]:
    """What the lock file says about its holder ({} when empty or unreadable)."""
    try:
        return dict(json.loads(path.read_text() or "{}"))
    except (OSError, ValueError):
        return {}


def describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "an unknown process"
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')} "
        f"(started {holder.get('started')}: {holder.get('command', '')})"
    )


class SweepLock:
    """Held while a driver runs a sweep; ``with SweepLock(dir):`` or acquire/release."""

    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.path = sweep_dir / LOCK_NAME
        self.stale: dict[str, Any] | None = None  # the dead holder this driver took over from
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._created: list[Path] = []

    def acquire(self) -> SweepLock:
        self._created = [p for p in (self.sweep_dir, *self.sweep_dir.parents) if not p.exists()]
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self._lock_folder()
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._refuse(describe(holder_of(self.path)))
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed the file as we opened it: lock the new one
        old = holder_of(self.path)
        if old:
            self.stale = old
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(sys.argv)[:300],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def _lock_folder(self) -> None:
        """``flock`` the sweep folder's own descriptor; refuse when a live driver holds it."""
        fd = os.open(self.sweep_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = holder_of(self.path) or folder_holder(self.sweep_dir)
            removed = "" if self.path.exists() else f" (its lock file {self.path} was removed)"
            self._refuse(describe(holder) + removed)
        except OSError:  # no directory locks here: the file's lock alone
            os.close(fd)
            return
        self._dir_fd = fd

    def _refuse(self, holder: str) -> None:
        self.release()
        self._remove_created_dirs()
        raise SweepLockedError(
            f"{self.sweep_dir}: another sweep driver is running on this folder: {holder}. "
            "Wait for it, or stop it; a lock left by a dead driver is taken over "
            f"automatically (lock file {self.path})"
        ) from None

    def release(self) -> None:
        """Remove the lock file, then drop the locks (in that order: see ``_same_file``)."""
        if self._fd is None and self._dir_fd is None:
            return
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        self._remove_created_dirs()

    def _remove_created_dirs(self) -> None:
        """A sweep that stopped before writing anything leaves no folder behind."""
        for path in self._created:
            try:
                path.rmdir()
            except OSError:
                break  # not empty: something was written

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (a releasing holder unlinks it first)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def folder_holder(sweep_dir: Path) -> dict[str, object]:
    """The pid holding ``sweep_dir``'s folder lock, from ``/proc/locks`` (Linux), when its
    lock file is gone; {} when this machine cannot tell."""
    try:
        ino, table = os.stat(sweep_dir).st_ino, Path("/proc/locks").read_text()
    except OSError:
        return {}
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(ino):
            return {"pid": int(fields[4]), "host": socket.gethostname(), "started": "?"}
    return {}
