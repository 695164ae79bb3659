"""The sweep's axes as typed columns: ``spec_json`` flattened for every field that varies.

Why: a hyperparameter sweep varies spec fields (``lr``, ``epochs``,
``protocol_params.q``) that the fixed record schema has no column for; they sit inside
``spec_json``. Each distinct spec string is parsed once (the column is categorical:
a million rows hold a few hundred trainings' specs), so flattening costs little.

Which fields: the sweep's ``manifest.json`` lists the fields its plan varies; without a
manifest (older sweeps, hand-made records) the fields whose value differs between the
records' specs. A field that is also a record column (``seed``, ``partition``,
``defense``…) keeps the record's column, which holds the resolved value (a stacked
defense's ``mid+gs`` label, the resolved model name).

Not every varying field is an axis of its own (``axis_roles``): the engine sets ``epochs``,
``batch_size`` and ``model`` per dataset, and ``protocol_params.q`` exists for FedBCD only;
each follows the axis that determines it. ``by_axis.csv`` keeps them all as columns; the
figures draw the axes and name the followers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trainables.results.manifest import flat_spec

# Not axes: a training-time attack is an attack row (``ap:<attack>``), not a setting.
NOT_AXES = ("train_attack", "train_attack_params", "train_attack_adapt")


_PARSED: list[tuple[pd.Index, pd.DataFrame]] = []  # the last categories parsed, and their table


def parsed_specs(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """(one flattened row per distinct spec string, each record's row number in it).

    The table is read-only to callers: the by-axis tables and each ``--compare`` of one
    report parse the same categories (the frames share them), so the last one is kept."""
    spec = records["spec_json"]
    if not isinstance(spec.dtype, pd.CategoricalDtype):
        spec = spec.astype("category")
    categories = spec.cat.categories
    if _PARSED and _PARSED[0][0] is categories:
        table = _PARSED[0][1]
    else:
        flats = [flat_spec(_load(text)) for text in categories]
        table = pd.DataFrame(flats, index=range(len(flats)))
        _PARSED[:] = [(categories, table)]
    return table, pd.Series(spec.cat.codes.to_numpy(), index=records.index)


def _load(text: object) -> dict[str, Any]:
    try:
        value = json.loads(str(text))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def varying(table: pd.DataFrame, codes: pd.Series) -> list[str]:
    """Fields of ``table`` whose value differs between the specs the records use."""
    used = table.iloc[np.unique(codes[codes >= 0].to_numpy())] if len(table) else table
    return [column for column in used.columns if _distinct_json(used[column]) > 1]


def _distinct_json(values: pd.Series) -> int:
    """How many distinct JSON texts the values have, each distinct value dumped once:
    equal str/int/bool/None values of one type have the same text (floats, containers
    and the rest are dumped one by one: 0.0 == -0.0 and 1 == 1.0 dump differently)."""
    plain = (str, int, bool, type(None))
    seen: set[tuple[type, object]] = set()
    texts: set[str] = set()
    for v in values.tolist():
        kind = type(v)
        if kind in plain:
            if (kind, v) not in seen:
                seen.add((kind, v))
                texts.add(json.dumps(v, sort_keys=True, default=str))
        else:
            texts.add(json.dumps(v, sort_keys=True, default=str))
    return len(texts)


def typed(values: pd.Series) -> pd.Series:
    """Integers as Int64, numbers as float64, anything else as a categorical of strings."""
    present = values.dropna()
    if len(present) and all(isinstance(v, bool) for v in present):
        return values.astype("boolean")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return values.astype("Int64")
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return values.astype("float64")
    text = values.map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v))
    return text.astype("category")


def flatten(
    records: pd.DataFrame, manifest: dict[str, Any] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """``records`` plus one typed column per varying spec field; returns (frame, axes).

    ``axes`` names the varying fields in the manifest's order (else sorted), each a
    column of the frame (a record column where one has the field's name).
    """
    if "spec_json" not in records.columns or records.empty:
        return records, []
    table, codes = parsed_specs(records)
    if manifest and isinstance(manifest.get("varying_fields"), list):
        fields = [str(f) for f in manifest["varying_fields"]]
        fields = [f for f in fields if f in table.columns or f in records.columns]
        inferred = [f for f in varying(table, codes) if f not in fields]
        fields += inferred  # e.g. fields only a search filled, absent from the plan
    else:
        fields = varying(table, codes)
    fields = [f for f in fields if f not in NOT_AXES]
    out = records.copy(deep=False)  # copy-on-write: new columns only, no row copied
    for name in fields:
        if name in out.columns or name not in table.columns:
            continue
        column = typed(table[name].astype(object).where(table[name].notna(), None))
        taken = column.take(codes.clip(lower=0).to_numpy()).set_axis(records.index)
        out[name] = taken.where(codes.to_numpy() >= 0)
    return out, fields


# Record columns that name a setting the user picks: an axis of its own before any field
# that follows it (``epochs``, ``batch_size`` and ``model`` are set per dataset).
PRIMARY = (
    "dataset",
    "n_parties",
    "partition",
    "protocol",
    "ssl_variant",
    "aligned_ratio",
    "n_labeled",
    "defense",
    "defense_param",
    "model",
)


@dataclass(frozen=True)
class AxisRoles:
    """Which varying fields are axes of their own and which only follow one.

    Why: a sweep over datasets varies ``epochs``, ``batch_size`` and ``model`` too (each
    dataset's defaults), and a protocol axis varies ``protocol_params.q`` (NaN for FedSGD);
    a figure against such a field repeats its leader's figure under a name the user never
    varied, with ``nan`` in its legend. ``by_axis.csv`` keeps every field; figures draw
    ``axes`` only, each level named with its parameters (``fedbcd q=5``).
    """

    axes: list[str]  # axes of their own, in the order given
    follows: dict[str, str] = field(default_factory=dict)  # field -> the axis it follows
    params: dict[str, list[str]] = field(default_factory=dict)  # axis -> its parameters


def axis_roles(cells: pd.DataFrame, fields: list[str]) -> AxisRoles:
    """The roles of ``fields`` over ``cells`` (one row per combination, or more).

    A field follows an axis when its value is a function of that axis's value over the
    cells (``epochs`` of ``dataset``); record columns the user picks (``PRIMARY``) lead.
    A leader whose every cell differs (a searched ``lr``) trivially determines any field,
    so it leads only a field that determines it back. ``<axis>_params.<name>`` fields are
    the axis's parameters: they follow it and name its levels (defense's strengths keep
    their own axis: its figures draw each defense on its own strengths).
    """
    rank = {f: PRIMARY.index(f) if f in PRIMARY else len(PRIMARY) for f in fields}
    order = sorted(fields, key=rank.__getitem__)  # stable: the given order within a rank
    keys = cells[fields].astype(str)  # a missing value is a value of its own
    n_cells = len(keys.drop_duplicates())
    kept: list[str] = []
    roles = AxisRoles(kept)
    for name in order:
        owner = _param_owner(name, fields)
        if owner in kept and owner != "defense":
            roles.follows[name] = owner
            roles.params.setdefault(owner, []).append(name)
            continue
        leader = next((a for a in kept if _leads(keys, a, name, n_cells)), None)
        if leader is None:
            kept.append(name)
        else:
            roles.follows[name] = leader
    kept.sort(key=fields.index)
    return roles


def _param_owner(name: str, fields: list[str]) -> str | None:
    """``protocol`` for ``protocol_params.q`` (``split_scheme`` for ``split_params.*``)."""
    head = name.split(".", 1)[0]
    if "." not in name or not head.endswith("_params"):
        return None
    base = head[: -len("_params")]
    return next((f for f in (base, f"{base}_scheme") if f in fields), None)


def _leads(keys: pd.DataFrame, leader: str, name: str, n_cells: int) -> bool:
    """Whether ``name``'s value is a function of ``leader``'s over the cells."""

    def function_of(a: str, b: str) -> bool:
        return bool((keys.groupby(a, sort=False)[b].nunique() <= 1).all())

    if not function_of(leader, name):
        return False
    unique = keys[leader].nunique() == n_cells  # every cell its own leader value
    return leader in PRIMARY or not unique or function_of(name, leader)


def show(value: object) -> str:
    """A level as a reader types it: ``0.01``, ``fedbcd``; a missing one as ``unset``."""
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return "unset"
    return f"{value:g}" if isinstance(value, float) else str(value)


def level_names(frame: pd.DataFrame, axis: str, params: list[str]) -> pd.Series:
    """Each row's ``axis`` level named with its parameters (``fedbcd q=5``; ``fedsgd``,
    whose ``q`` is unset), ordered by value (``q=5`` before ``q=10``): one categorical
    the figures use as x, line or panel instead of the axis and its parameters apart."""
    keys = [axis, *params]
    groups = frame.groupby(keys, observed=True, dropna=False, sort=True)
    codes = groups.ngroup().to_numpy()
    names = []
    for values in groups.size().index:
        row = values if isinstance(values, tuple) else (values,)
        text = show(row[0])
        for param, value in zip(params, row[1:], strict=True):
            if show(value) != "unset":
                text += f" {param.rsplit('.', 1)[-1]}={show(value)}"
        names.append(text)
    unique = list(dict.fromkeys(names))  # distinct groups may read alike: keep one name
    of_group = np.array([unique.index(n) for n in names], dtype=int)
    dtype = pd.CategoricalDtype(unique, ordered=True)
    return pd.Series(pd.Categorical.from_codes(of_group[codes], dtype=dtype), index=frame.index)
