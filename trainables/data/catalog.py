"""Dataset registry, data-directory resolution and the cached ``load_dataset`` entry point.

Why a cache: a sweep runs many trials in one process and parsing Adult or MNIST each time
would dominate short trials. The cached ``Dataset`` is frozen with read-only arrays, so
sharing one object between trials is safe.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainables.data.dataset import Dataset
from trainables.errors import ConfigError, MissingDataError, did_you_mean
from trainables.plugins import Refused
from trainables.registry import Registry

DATA_ENV = "VFLSWEEP_DATA"

# The repository's sibling ``shared/datasets`` (…/work/main/trainables/data/catalog.py ->
# …/work/shared/datasets): where the offline benchmark files live in a standard checkout.
SIBLING_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "datasets"

Loader = Callable[..., Dataset]


def builtin(loader: Loader) -> Loader:
    """Mark a loader as needing no files, so its cache key ignores the data directory."""
    vars(loader)["ignores_data_dir"] = True  # a mark in the function's own namespace
    return loader


def classes(n: int) -> Callable[[Loader], Loader]:
    """Record a file dataset's class count, known without its files.

    Why: a dry run plans a space on a machine without the data (a fresh clone); the plan
    needs the class count to drop binary-only attacks. ``tests/test_plan_without_data.py``
    checks each recorded count against the loaded dataset where the files are present.
    """

    def mark(loader: Loader) -> Loader:
        vars(loader)["n_classes"] = n  # a mark in the function's own namespace
        return loader

    return mark


def known_classes(name: str, params: dict[str, object] | None = None) -> int | None:
    """The recorded class count of dataset ``name`` (file datasets), or None; a loader's
    ``classes`` parameter (MNIST's first n classes) where given."""
    given = (params or {}).get("classes")
    if isinstance(given, int) and not isinstance(given, bool):
        return given
    return getattr(DATASETS.get(name), "n_classes", None)


def default_data_dir() -> Path | None:
    """``$VFLSWEEP_DATA`` if set, else the sibling ``shared/datasets`` if it exists, else None.

    The environment value is returned even if it does not exist, so that the error a file
    loader raises names the directory the user actually asked for.
    """
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    return SIBLING_DATA_DIR if SIBLING_DATA_DIR.is_dir() else None


def data_file(data_dir: Path | None, relative: str, dataset: str) -> Path:
    """The path of ``relative`` under ``data_dir``; MissingDataError naming it if absent."""
    how = f"point at the data with --data-dir DIR or {DATA_ENV}=DIR"
    if data_dir is None:
        raise MissingDataError(
            f"dataset {dataset!r} needs the file {relative} from a data directory, but none "
            f"is set and the default {SIBLING_DATA_DIR / relative} does not exist; {how}",
            dataset=dataset,
            file=relative,
        )
    path = data_dir / relative
    if not path.is_file():
        raise MissingDataError(
            f"dataset {dataset!r} needs {path}, which does not exist; {how} "
            f"(DIR must contain {relative})",
            dataset=dataset,
            file=relative,
        )
    return path


@functools.lru_cache(maxsize=64)
def _resolved(path: Path) -> Path:
    """``path.resolve()`` of an absolute path, kept: the planner loads a cached dataset
    ~20,000 times for a large space, and resolving walks the file system each time (2.3 s
    for ssl.yaml)."""
    return path.resolve()


@functools.lru_cache(maxsize=16)
def _load_cached(
    name: str, data_dir: Path | None, params: tuple[tuple[str, object], ...]
) -> Dataset:
    return DATASETS.get(name)(data_dir, **dict(params))


def load_dataset(name: str, data_dir: str | Path | None = None, **params: object) -> Dataset:
    """Load the dataset registered as ``name``; unknown names raise ConfigError with the list.

    ``data_dir`` None falls back to ``default_data_dir()``. Built-in datasets ignore it.
    Results are cached per (name, resolved directory, params).
    """
    loader = DATASETS.get(name)
    if getattr(loader, "ignores_data_dir", False):
        resolved: Path | None = None
    else:
        chosen = default_data_dir() if data_dir is None else Path(data_dir).expanduser()
        resolved = (
            None
            if chosen is None
            else (_resolved(chosen) if chosen.is_absolute() else chosen.resolve())
        )
    key = tuple(sorted(params.items()))
    try:
        hash(key)
    except TypeError:
        return loader(resolved, **params)
    return _load_cached(name, resolved, key)


def reject_params(dataset: str, params: dict[str, object], allowed: tuple[str, ...] = ()) -> None:
    """ConfigError for parameters a loader does not take (a typo would silently do nothing)."""
    extra = sorted(set(params) - set(allowed))
    if extra:
        allowed_text = ", ".join(allowed) if allowed else "none"
        hint = did_you_mean(extra[0], allowed) if len(extra) == 1 else ""
        raise ConfigError(
            f"dataset {dataset!r} got unknown parameter(s) {', '.join(extra)}; "
            f"{hint}allowed: {allowed_text}"
        )


def check_dataset(loader: Any, name: str) -> Loader:
    """The rules every dataset loader obeys (``tests/test_data.py``,
    ``tests/test_plan_without_data.py``): called as ``loader(data_dir, **params)``, it
    refuses an unknown parameter with a ConfigError (a typo must not pass silently); a
    loader marked ``@builtin`` (needs no files) returns a valid ``Dataset`` named ``name``
    on a call with no parameters; one that reads files declares its class count with
    ``@classes(n)``, so that a dry run plans it without its files."""
    if not callable(loader):
        raise Refused("it is not callable as loader(data_dir, **params)")
    try:
        inspect.signature(loader).bind(None, zz_probe=1)
    except TypeError:
        raise Refused("it is not callable as loader(data_dir, **params)") from None
    try:
        loader(None, zz_probe=1)
    except MissingDataError:
        raise Refused("it looks for files before refusing an unknown parameter") from None
    except ConfigError:
        pass
    else:
        raise Refused("it took the unknown parameter zz_probe=1 (call reject_params)")
    if getattr(loader, "ignores_data_dir", False):
        ds = loader(None)
        if not isinstance(ds, Dataset) or ds.name != name:
            got = f"Dataset {ds.name!r}" if isinstance(ds, Dataset) else type(ds).__name__
            raise Refused(f"loader(None) returned {got}, not a Dataset named {name!r}")
        return loader
    n_classes = getattr(loader, "n_classes", None)
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 2:
        raise Refused(
            "it reads files but declares no class count >= 2 (mark it @classes(n), or "
            "@builtin if it needs no files)"
        )
    return loader


# Registered last: its ``check`` is the function above
DATASETS: Registry[Loader] = Registry(
    "dataset", "vflsweep.datasets", "trainables.data", check=check_dataset
)
