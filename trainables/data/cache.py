"""The engine's per-machine cache folder, and the small JSON and npz files kept in it.

Why one place: the cost cache (``sweep_engine/costs.py``), the per-dataset measurements
of VertiBench splits (``trainables/data/vertibench_split.py``) and the scikit-learn
datasets (``trainables/data/builtin.py``) all keep results that are slow to compute and
the same on every run; ``$VFLSWEEP_CACHE`` moves all of them (the test
suite points it at a temporary folder).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

import numpy as np

CACHE_ENV = "VFLSWEEP_CACHE"
J = TypeVar("J")  # a JSON value: what ``compute`` returns, and the file holds


def cache_root() -> Path:
    """``$VFLSWEEP_CACHE``, else ``$XDG_CACHE_HOME/vflsweep``, else ``~/.cache/vflsweep``."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vflsweep"


def cached_arrays(name: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays stored as ``<cache>/<name>.npz``, computing and storing them if absent
    (atomically, as ``cached_json``; an unreadable file is computed again). No pickles:
    numbers and strings only."""
    path = cache_root() / f"{name}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {key: stored[key] for key in stored.files}
    except (OSError, ValueError, zipfile.BadZipFile):
        pass
    value = compute()
    _store(path, lambda fh: np.savez(fh, **cast(dict[str, Any], value)))  # arrays only
    return value


def cached_json(name: str, compute: Callable[[], J]) -> J:
    """The JSON value stored as ``<cache>/<name>.json``, computing and storing it if absent.

    Writes are atomic (a temporary file renamed over), so workers that compute the same
    value at once both end with a whole file; an unreadable file is computed again.
    """
    path = cache_root() / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    value = compute()
    _store(path, lambda fh: fh.write(json.dumps(value).encode()))
    return value


def _store(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write`` into a temporary file beside ``path``, renamed over it (atomic); nothing
    when the folder cannot be written: a read-only home still computes, only again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except OSError:
        pass
