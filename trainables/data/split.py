"""How a dataset is divided among parties: by columns (features) and by rows (samples).

Why here and not in the protocols: every protocol must see the same partition for the same
config, so trials are comparable; the split is a property of the data setting, not of the
algorithm. Column splits follow the usual VFL benchmarks: contiguous blocks of original
fields for tabular data, image halves/quadrants/stripes for images (as VFLAIR and FedHSSL
do with MNIST).

``split_for(spec, ds)`` is the one place a trial's rows and columns are divided: every
trial kind that splits (NN VFL, FedHSSL, FedCVT, trees, Paillier LR) takes its ``Split``
from it, and every planner check its refusal from ``split_refusal``, so a spec field that
decides the split (``aligned_ratio``, ``n_aligned``, ``n_labeled``, ``val_ratio``, ``seed``,
``split_scheme`` / ``split_params``, ``n_parties``) is read here once and cannot be
forgotten by one kind (``tests/test_split_conformance.py``).
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from trainables.data.dataset import Dataset
from trainables.errors import ConfigError, MissingDataError

if TYPE_CHECKING:
    from trainables.data.vertibench_split import Measured

# a function of the data alone; ``bands``: horizontal image bands, party 0 the top one
# (VFLAIR's image partition: ``dataset_partition``, ``[:, :, :half, :]``); ``vflair``:
# VFLAIR's partition, ``bands`` for an image among 2 parties, else what ``auto`` takes
# (its 4 parties get image quarters, party 0 the top-left, as ``quarters`` does)
FIXED = ("auto", "blocks", "halves", "quarters", "stripes", "bands", "vflair")
SCHEMES = (*FIXED, "importance", "correlation")  # the last two: VertiBench's, seeded


def _cols(indices: np.ndarray | list[int]) -> np.ndarray:
    return np.sort(np.asarray(indices, dtype=np.int64))


def _stripes(shape: tuple[int, int], n_parties: int) -> list[np.ndarray]:
    """Vertical stripes of near-equal width; each party sees every row of its columns."""
    h, w = shape
    grid = np.arange(h * w).reshape(h, w)
    return [_cols(grid[:, cols].ravel()) for cols in np.array_split(np.arange(w), n_parties)]


def _bands(shape: tuple[int, int], n_parties: int) -> list[np.ndarray]:
    """Horizontal bands of near-equal height, party 0 the top one: each party sees every
    column of its image rows (VFLAIR splits its images so)."""
    h, w = shape
    grid = np.arange(h * w).reshape(h, w)
    return [_cols(grid[rows].ravel()) for rows in np.array_split(np.arange(h), n_parties)]


def _quarters(shape: tuple[int, int]) -> list[np.ndarray]:
    """2x2 quadrants in reading order: top-left, top-right, bottom-left, bottom-right."""
    h, w = shape
    grid = np.arange(h * w).reshape(h, w)
    return [
        _cols(grid[rows][:, cols].ravel())
        for rows in np.array_split(np.arange(h), 2)
        for cols in np.array_split(np.arange(w), 2)
    ]


def _blocks(ds: Dataset, n_parties: int) -> list[np.ndarray]:
    """Contiguous near-equal runs of original fields; a one-hot group is never split."""
    chunks = np.array_split(np.arange(len(ds.feature_groups)), n_parties)
    return [_cols([i for g in chunk for i in ds.feature_groups[g]]) for chunk in chunks]


def _check_parties(ds: Dataset, n_parties: int, maximum: int, unit: str) -> None:
    if n_parties < 2 or n_parties > maximum:
        raise ConfigError(
            f"n_parties={n_parties} is not allowed for dataset {ds.name!r}: it has {maximum} "
            f"{unit}, so n_parties must be in [2, {maximum}]"
        )


def vertical_split(ds: Dataset, n_parties: int, scheme: str = "auto") -> list[np.ndarray]:
    """Column indices per party: disjoint, together all columns, each sorted int64.

    ``auto``: image datasets get ``halves`` for 2 parties, ``quarters`` for 4 and
    ``stripes`` otherwise; tabular datasets get ``blocks``. ``halves``/``quarters`` demand an
    image dataset and exactly 2/4 parties. Party 0 holds the first (left / top-left) part.
    """
    if isinstance(n_parties, bool) or not isinstance(n_parties, int | np.integer):
        raise ConfigError(f"n_parties={n_parties!r} must be an integer >= 2")
    n_parties = int(n_parties)
    if scheme not in FIXED:
        raise ConfigError(
            f"unknown split scheme {scheme!r} here; known: {', '.join(FIXED)} "
            f"({', '.join(SCHEMES[len(FIXED) :])} need a trial spec: use columns_for)"
        )
    shape = ds.image_shape
    if scheme == "vflair":
        scheme = "bands" if shape is not None and n_parties == 2 else "auto"
    if scheme == "auto":
        scheme = (
            "blocks" if shape is None else {2: "halves", 4: "quarters"}.get(n_parties, "stripes")
        )
    if scheme == "blocks":
        _check_parties(ds, n_parties, len(ds.feature_groups), "feature groups (fields)")
        return _blocks(ds, n_parties)
    if shape is None:
        raise ConfigError(
            f"split scheme {scheme!r} needs an image dataset, but {ds.name!r} is tabular "
            f"(image_shape is None); use 'blocks' or 'auto'"
        )
    if scheme == "stripes":
        _check_parties(ds, n_parties, shape[1], "image columns")
        return _stripes(shape, n_parties)
    if scheme == "bands":
        _check_parties(ds, n_parties, shape[0], "image rows")
        return _bands(shape, n_parties)
    wanted = 2 if scheme == "halves" else 4
    if n_parties != wanted:
        raise ConfigError(
            f"split scheme {scheme!r} needs n_parties={wanted}, got n_parties={n_parties}; "
            f"use 'auto' or 'stripes' for other counts"
        )
    if min(shape) < 2:
        raise ConfigError(f"split scheme {scheme!r} needs an image at least 2x2, got {shape}")
    return _stripes(shape, 2) if scheme == "halves" else _quarters(shape)


class SpecLike(Protocol):
    """The fields of a trial spec that decide its column split (read-only: a frozen
    spec, a pydantic model or a test's namespace all match)."""

    @property
    def dataset(self) -> str: ...
    @property
    def dataset_params(self) -> Mapping[str, object]: ...
    @property
    def n_parties(self) -> int: ...
    @property
    def split_scheme(self) -> str: ...
    @property
    def split_params(self) -> Mapping[str, object]: ...
    @property
    def seed(self) -> int: ...


class RowSpecLike(SpecLike, Protocol):
    """The fields of a trial spec that decide its whole split: columns and rows."""

    @property
    def aligned_ratio(self) -> float: ...
    @property
    def n_aligned(self) -> int | None: ...
    @property
    def n_labeled(self) -> int | None: ...
    @property
    def val_ratio(self) -> float: ...


def columns_for(spec: SpecLike, ds: Dataset, n_parties: int | None = None) -> list[np.ndarray]:
    """Column indices per party for ``spec``: the one place every kind divides columns.

    ``split_scheme`` picks the scheme, ``split_params`` its parameters, ``seed`` its draw
    (VertiBench's schemes); ``n_parties`` overrides the spec's for kinds with a fixed count.
    What a seeded split measured is kept for the trial's records (``split_record``).
    """
    n = spec.n_parties if n_parties is None else n_parties
    check_columns(spec, ds, n)
    if spec.split_scheme in FIXED:
        return vertical_split(ds, n, spec.split_scheme)
    from trainables.data import vertibench_split

    columns, measured = vertibench_split.split(
        ds, n, spec.split_scheme, spec.split_params, spec.seed
    )
    _MEASURED[_split_key(spec, n)] = measured
    return columns


def check_columns(spec: SpecLike, ds: Dataset, n_parties: int | None = None) -> None:
    """``columns_for``'s refusals without its work (a planner's cheap check): bad scheme,
    bad parameters, more parties than the scheme can give columns to."""
    from trainables.data import vertibench_split

    n = spec.n_parties if n_parties is None else n_parties
    if spec.split_scheme in FIXED:
        if spec.split_params:
            vertibench_split.refuse_params(spec.split_scheme, spec.split_params)
        vertical_split(ds, n, spec.split_scheme)
        return

    if spec.split_scheme not in SCHEMES:
        raise ConfigError(
            f"unknown split scheme {spec.split_scheme!r}; known: {', '.join(SCHEMES)}"
        )
    vertibench_split.params_of(spec.split_scheme, spec.split_params)
    _check_parties(ds, n, len(ds.feature_groups), "feature groups (fields)")


_MEASURED: dict[tuple[object, ...], Measured] = {}


def _split_key(spec: SpecLike, n_parties: int) -> tuple[object, ...]:
    data = tuple(sorted(spec.dataset_params.items()))
    params = tuple(sorted(spec.split_params.items()))
    return (spec.dataset, data, n_parties, spec.split_scheme, params, spec.seed)


def split_record(spec: SpecLike, n_parties: int | None = None) -> dict[str, Any]:
    """The record columns of ``spec``'s split: scheme, its parameter (α or β), and, when
    this process made a seeded split for it, the passive parties' share of the Shapley
    importance (the active party is the last) and the correlation β it measured; the
    per-party shares go to ``extra``."""
    n = spec.n_parties if n_parties is None else n_parties
    param = None
    if spec.split_scheme in SCHEMES and spec.split_scheme not in FIXED:
        from trainables.data.vertibench_split import params_of

        param = next(iter(params_of(spec.split_scheme, spec.split_params).values()))
    out: dict[str, Any] = {
        "split_scheme": spec.split_scheme,
        "split_param": None if param is None else float(param),
    }
    measured = _MEASURED.get(_split_key(spec, n))
    if measured is not None:
        out["split_importance"] = float(sum(measured.importance[:-1]))
        out["split_correlation"] = measured.correlation
        out["split_party_importance"] = [round(x, 6) for x in measured.importance]
    return out


@dataclass(frozen=True)
class SampleSplit:
    """Which training rows are aligned (shared by all parties) and which of those are labeled.

    Why: semi-supervised and partially-aligned VFL (FedCVT, FedHSSL, VFLAIR's settings) differ
    exactly in these two fractions; the unaligned rows stay usable for local self-supervision.
    """

    aligned: np.ndarray
    unaligned: np.ndarray
    labeled: np.ndarray
    # validation rows (``val_ratio``): carved from the labeled aligned rows and then in
    # neither ``aligned`` nor ``labeled``, so no training of any kind learns from them
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _pick_labeled(order: np.ndarray, n_labeled: int, y: np.ndarray | None) -> np.ndarray:
    """The first ``n_labeled`` rows of a random ``order``, but when ``y`` is given and there
    is room, the first row of each class present is taken first, so no class goes unlabeled.
    Once ``n_labeled`` covers the classes, growing it only adds rows (nested label sets)."""
    if y is None:
        return order[:n_labeled]
    _, first = np.unique(y[order], return_index=True)
    if n_labeled < len(first):
        return order[:n_labeled]
    must = order[np.sort(first)]
    rest = order[~np.isin(order, must)]
    return np.concatenate([must, rest[: n_labeled - len(must)]])


def carve_validation(
    rows: np.ndarray, y: np.ndarray | None, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): a seeded ``fraction`` of ``rows`` (at least one, at most all but one)
    held out, stratified by ``y`` (indexed by the row numbers) when given: each class gets
    its share, the rounding remainders going to the largest fractional parts.

    The one carving function: the trial's validation rows (``split_samples``' ``val``) and
    FedHSSL's fine-tuning lr choice (``ssl/hssl/finetune.py``) both come from it."""
    rows = np.asarray(rows, dtype=np.int64)
    n_val = max(1, math.floor(fraction * len(rows) + 0.5))
    if n_val >= len(rows):
        raise ConfigError(
            f"val_ratio={fraction} leaves no training rows: {len(rows)} labeled aligned rows, "
            f"{n_val} would be validation rows; lower val_ratio or label more rows"
        )
    order = np.random.default_rng([seed, 4049]).permutation(len(rows))
    if y is None:
        picked = order[:n_val]
    else:
        labels = np.asarray(y)[rows][order]
        classes, counts = np.unique(labels, return_counts=True)
        exact = counts * n_val / len(rows)
        quota = np.floor(exact).astype(np.int64)
        quota[np.argsort(-(exact - quota), kind="stable")[: n_val - int(quota.sum())]] += 1
        picked = np.concatenate(
            [order[labels == c][:q] for c, q in zip(classes, quota, strict=True)]
        )
    val = np.sort(rows[picked])
    return np.sort(np.setdiff1d(rows, val)), val


def split_samples(
    n_train: int,
    aligned_ratio: float = 1.0,
    n_labeled: int | None = None,
    seed: int = 0,
    y: np.ndarray | None = None,
    n_aligned: int | None = None,
    val_ratio: float = 0.0,
) -> SampleSplit:
    """Choose aligned / unaligned / labeled training rows, deterministically in ``seed``.

    ``aligned_ratio`` in (0, 1] is the fraction of train rows all parties share (rounded, at
    least 1); ``n_aligned``, when given, is that count directly (overrides the ratio).
    ``n_labeled`` (default: all aligned) of the aligned rows carry labels; with
    ``y`` given, every class present among the aligned rows gets a labeled row whenever
    ``n_labeled`` is at least the number of such classes. ``val_ratio`` > 0 then holds
    out that share of the labeled rows as validation rows (``carve_validation``), taken
    out of ``aligned`` and ``labeled``.
    """
    if isinstance(n_train, bool) or not isinstance(n_train, int | np.integer) or n_train < 1:
        raise ConfigError(f"n_train={n_train!r} must be a positive integer")
    ratio = float(aligned_ratio)
    if not 0.0 < ratio <= 1.0:  # also rejects NaN
        raise ConfigError(f"aligned_ratio={aligned_ratio} is outside (0, 1]")
    if y is not None and np.shape(y) != (n_train,):
        raise ConfigError(f"y has shape {np.shape(y)}, expected ({n_train},) for n_train")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(int(n_train))
    if n_aligned is None:
        n_aligned = max(1, min(int(n_train), math.floor(ratio * n_train + 0.5)))
    elif isinstance(n_aligned, bool) or not 1 <= int(n_aligned) <= n_train:
        raise ConfigError(f"n_aligned={n_aligned!r} is outside [1, {n_train}] (n_train)")
    n_aligned = int(n_aligned)
    aligned = np.sort(perm[:n_aligned]).astype(np.int64)
    unaligned = np.sort(perm[n_aligned:]).astype(np.int64)
    if n_labeled is None:
        labeled = aligned.copy()
    else:
        if isinstance(n_labeled, bool) or not isinstance(n_labeled, int | np.integer):
            raise ConfigError(f"n_labeled={n_labeled!r} must be an integer or null")
        if not 1 <= n_labeled <= n_aligned:
            raise ConfigError(
                f"n_labeled={n_labeled} is outside [1, {n_aligned}]: there are {n_aligned} "
                f"aligned rows (n_train={n_train}, aligned_ratio={aligned_ratio})"
            )
        order = aligned[rng.permutation(n_aligned)]
        labels = None if y is None else np.asarray(y)
        labeled = np.sort(_pick_labeled(order, int(n_labeled), labels)).astype(np.int64)
    if not val_ratio:
        return SampleSplit(aligned=aligned, unaligned=unaligned, labeled=labeled)
    labeled, val = carve_validation(labeled, y, val_ratio, seed)
    aligned = np.setdiff1d(aligned, val).astype(np.int64)
    return SampleSplit(aligned=aligned, unaligned=unaligned, labeled=labeled, val=val)


@dataclass(frozen=True)
class Split:
    """A trial's division of ``ds``: column indices per party (party order; the last is
    active) and which training rows are aligned, unaligned and labeled."""

    columns: tuple[np.ndarray, ...]
    rows: SampleSplit


ROWS_KEPT = 256  # ``rows_for`` results kept (a planner asks for the same rows many times)
# (a weak reference: kept rows never keep a dataset alive)
_ROWS: OrderedDict[tuple[object, ...], tuple[weakref.ref[Dataset], SampleSplit | str]] = (
    OrderedDict()
)


def rows_for(spec: RowSpecLike, ds: Dataset) -> SampleSplit:
    """``split_for``'s rows alone, for checks that need no columns (a seeded VertiBench
    column split can take seconds). Labels go in so every class gets a labeled row; the
    aligned / unaligned rows do not depend on them, and neither does a refusal. Kept per
    (dataset, row fields), refusals too: planning ssl.yaml drew the same rows ~7,000 times
    (9 s); each call gets its own copy of the arrays."""
    key = (id(ds), spec.aligned_ratio, spec.n_labeled, spec.seed, spec.n_aligned, spec.val_ratio)
    hit = _ROWS.get(key)
    if hit is None or hit[0]() is not ds:  # an id reused by another dataset: not a hit
        try:
            got: SampleSplit | str = split_samples(
                len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed,
                y=ds.y_train, n_aligned=spec.n_aligned, val_ratio=spec.val_ratio,
            )  # fmt: skip
        except ConfigError as err:
            got = str(err)
        hit = _ROWS[key] = (weakref.ref(ds), got)
        while len(_ROWS) > ROWS_KEPT:
            _ROWS.popitem(last=False)
    _ROWS.move_to_end(key)
    if isinstance(hit[1], str):
        raise ConfigError(hit[1])
    rows = hit[1]
    return SampleSplit(
        rows.aligned.copy(), rows.unaligned.copy(), rows.labeled.copy(), rows.val.copy()
    )


def split_for(spec: RowSpecLike, ds: Dataset, n_parties: int | None = None) -> Split:
    """The split a trial of ``spec`` trains on; ConfigError when ``ds`` cannot host it.

    ``n_parties`` overrides the spec's for kinds with a fixed count (FedCVT: 2); every
    other split field is the spec's, so all kinds see the same split for the same spec.
    """
    return Split(tuple(columns_for(spec, ds, n_parties)), rows_for(spec, ds))


def split_refusal(spec: RowSpecLike, ds: Dataset, n_parties: int | None = None) -> str | None:
    """Why ``ds`` cannot host ``split_for(spec, ds, n_parties)`` (too few columns or rows,
    a bad scheme or parameter), or None; the planner's cheap check: columns are checked,
    not drawn. A missing data file is not a refusal: MissingDataError propagates."""
    try:
        check_columns(spec, ds, n_parties)
        rows_for(spec, ds)
    except MissingDataError:
        raise
    except ConfigError as err:
        return str(err)
    return None
