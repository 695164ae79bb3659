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
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from trainables.results.manifest import flat_spec

# Not axes: a training-time attack is an attack row (``ap:<attack>``), not a setting.
NOT_AXES = ("train_attack", "train_attack_params")


def parsed_specs(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """(one flattened row per distinct spec string, each record's row number in it)."""
    spec = records["spec_json"]
    if not isinstance(spec.dtype, pd.CategoricalDtype):
        spec = spec.astype("category")
    flats = [flat_spec(_load(text)) for text in spec.cat.categories]
    table = pd.DataFrame(flats, index=range(len(flats)))
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
    for field in fields:
        if field in out.columns or field not in table.columns:
            continue
        column = typed(table[field].astype(object).where(table[field].notna(), None))
        taken = column.take(codes.clip(lower=0).to_numpy()).set_axis(records.index)
        out[field] = taken.where(codes.to_numpy() >= 0)
    return out, fields
