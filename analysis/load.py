"""Records → one pandas DataFrame, read with ``pyarrow.dataset`` (no Ray).

Why dictionary-encode: a sweep repeats the same few strings (dataset, defense, attack,
trial ids, the spec JSON of a training) over every row; as pandas categoricals the
group-bys of the analysis run on integer codes, and a million rows fit in little memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA, SPEC_TYPE
from trainables.results.checks import read_verified
from trainables.results.manifest import read_manifest

# Columns that identify a "scenario": VFLAIR ranks defenses within one dataset, partition,
# protocol and model; a sweep over several of them gets one ranking per scenario.
SCENARIO_COLUMNS = (
    "dataset",
    "n_parties",
    "partition",
    "protocol",
    "protocol_params",
    "model",
    "ssl_variant",
    "aligned_ratio",
    "n_labeled",
    "procedure",  # standard or vflair (``with_procedure``): their numbers do not pair
    "setting",  # every other spec field that varies (``with_setting``): never pooled
)
# spec fields a record column already stands for (a scenario column, the defense, the
# training-time attack) or that do not change what is measured (the seed is the replicate;
# the device only where it runs): ``with_setting`` leaves them out
NOT_SETTING = (
    "seed", "device", "dataset", "n_parties", "partition", "protocol", "protocol_params",
    "model", "ssl_variant", "aligned_ratio", "n_labeled", "procedure", "defense",
    "defense_param", "defense_params", "stack", "train_attack", "train_attack_params",
    "train_attack_adapt",
)  # fmt: skip
SPEC_FIELDS = frozenset(f.name for f in SPEC_TYPE)  # a TrialSpec's; other keys are not settings
CATEGORICAL = (
    "sweep",
    "trial_id",
    "config_hash",
    "setting_hash",
    "dataset",
    "partition",
    "protocol",
    "protocol_params",
    "model",
    "defense",
    "defense_party",
    "attack",
    "attack_label",
    "attack_preset",
    "attack_type",
    "ssl_variant",
    "procedure",
    "setting",
    "status",
    "engine_version",
    "spec_json",
)


def read_records(sweep_dir: Path | str, with_spec: bool = True) -> pd.DataFrame:
    """All records of ``sweep_dir/records`` (or of ``sweep_dir`` if it holds Parquet files),
    in the layout the sink writes: single files and compacted parts, each training once
    (``trainables/results/layout.py``), read while a compaction may run.

    Every file is verified before its rows are used (``read_verified``: page checksums and
    digests; a flipped byte decodes silently otherwise). A damaged file is skipped with a
    warning naming it; the frame's ``attrs["damaged"]`` maps each such path to why, so an
    answer can say it is incomplete.
    """
    sweep_dir = Path(sweep_dir)  # a notebook passes a str
    folder = sweep_dir / "records" if (sweep_dir / "records").is_dir() else sweep_dir
    # ``spec`` (the typed struct) is for other Parquet clients: the analysis parses each
    # distinct ``spec_json`` once instead (analysis/axes.py)
    columns = [n for n in RECORD_SCHEMA.names if n != "spec" and (with_spec or n != "spec_json")]
    verified = read_verified(folder, columns, stacklevel=3)
    table = verified.table
    if table.num_rows == 0:
        raise ConfigError(
            f"{sweep_dir}: no records (expected <sweep dir>/records/*.parquet); "
            "run the sweep first or pass the sweep's folder, e.g. results/smoke"
        )
    frame = table_to_frame(table)
    frame.attrs["damaged"] = {str(p): why for p, why in verified.damaged.items()}
    return frame


def table_to_frame(table: pa.Table) -> pd.DataFrame:
    """Arrow table with (a subset of) RECORD_SCHEMA → DataFrame, strings as categoricals.

    The ``attack`` column becomes each row's attack label (``attack_labels``).
    """
    table = attack_labels(table)
    if "spec_json" in table.column_names:
        parsed = parsed_specs(table.column("spec_json"))
        table = with_setting(with_procedure(table, parsed), parsed)
    arrays = []
    for name in table.column_names:
        column = table.column(name)
        if name in CATEGORICAL:
            column = column.dictionary_encode()
        arrays.append(column)
    return pa.table(arrays, names=table.column_names).to_pandas()


def with_procedure(table: pa.Table, parsed: dict[str, dict[str, Any]] | None = None) -> pa.Table:
    """A ``procedure`` column, each row's ``spec.procedure`` (the planner expanded the preset
    into the spec the record stores; older records, written before the field, ran the
    standard one), when some record ran ``procedure: vflair``: a defense's numbers under
    VFLAIR's procedure form a scenario of their own, not a pair with the standard's.
    Without such a record the table is left as it is."""
    if "spec_json" not in table.column_names or "procedure" in table.column_names:
        return table
    specs = table.column("spec_json")
    parsed = parsed_specs(specs) if parsed is None else parsed
    names = {text: str(spec.get("procedure", "standard")) for text, spec in parsed.items()}
    if "vflair" not in names.values():
        return table
    keys, values = pa.array(list(names), pa.string()), pa.array(list(names.values()), pa.string())
    picked = pc.coalesce(pc.take(values, pc.index_in(specs, value_set=keys)), "standard")
    return table.append_column("procedure", picked)


def parsed_specs(specs: pa.ChunkedArray) -> dict[str, dict[str, Any]]:
    """Each distinct non-empty ``spec_json`` and its parsed spec: the one place the analysis
    reads spec fields (a pack's thousands of rows share a few specs)."""
    return {text: json.loads(text) for text in pc.unique(specs).to_pylist() if text}


def with_setting(table: pa.Table, parsed: dict[str, dict[str, Any]] | None = None) -> pa.Table:
    """A ``setting`` column naming the spec fields, other than the scenario columns, the
    defense and the seed, that differ between the records (``epochs=3 lr=0.1``), when some
    do; the table as it is otherwise.

    Why: a cell is every field but the seed. Without this, two trainings that differ only
    in ``epochs`` (an edited space re-run into the same folder, or a grid over ``lr``)
    would be pooled into one cell as if they were seeds of one setting.
    """
    if "spec_json" not in table.column_names or "setting" in table.column_names:
        return table
    from trainables.results.manifest import flat_spec

    specs = table.column("spec_json")
    parsed = parsed_specs(specs) if parsed is None else parsed
    if len(parsed) < 2:
        return table
    flats = {}
    for text, spec in parsed.items():
        flat = flat_spec(spec)
        flats[text] = {
            k: v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            for k, v in flat.items()
            if k.split(".")[0] in SPEC_FIELDS and k.split(".")[0] not in NOT_SETTING
        }
    keys = sorted({k for flat in flats.values() for k in flat})
    varying = [k for k in keys if len({flat.get(k) for flat in flats.values()}) > 1]
    if not varying:
        return table
    labels = {
        text: " ".join(f"{k}={flat.get(k, 'null')}" for k in varying)
        for text, flat in flats.items()
    }
    keys_array = pa.array(list(labels), pa.string())
    values = pa.array(list(labels.values()), pa.string())
    picked = pc.take(values, pc.index_in(specs, value_set=keys_array))
    return table.append_column("setting", picked)


def attack_labels(table: pa.Table) -> pa.Table:
    """``attack`` replaced by the label the record's ``extra`` gives (``lrb@strong``,
    ``lrb[margin=5.0]``): the analysis groups, pairs and ranks by ``attack``, and the same
    attack run with another preset or other parameters is another attack there. Rows
    without a label (clean rows, records written before presets) keep their name.

    Only rows whose ``extra`` mentions a label are parsed, each distinct string once.
    """
    if "attack" not in table.column_names:
        return table
    if "attack_label" in table.column_names and table.column("attack_label").null_count == 0:
        at = table.column_names.index("attack")  # schema 2: the label is a column
        label = table.column("attack_label").cast(pa.string())
        return table.set_column(at, pa.field("attack", pa.string()), label)
    if "extra" not in table.column_names:
        return table
    extra = table.column("extra")
    has = pc.fill_null(pc.match_substring(extra, '"attack_label"'), False)
    if not pc.any(has).as_py():
        return table
    labels: dict[str, str] = {}
    for text in pc.unique(pc.filter(extra, has)).to_pylist():
        label = json.loads(text).get("attack_label")
        if isinstance(label, str) and label:
            labels[text] = label
    keys, values = pa.array(list(labels)), pa.array(list(labels.values()))
    picked = pc.take(values, pc.index_in(extra, value_set=keys))  # null where unlabeled
    attack = pc.coalesce(picked, table.column("attack").cast(pa.string()))
    at = table.column_names.index("attack")
    return table.set_column(at, pa.field("attack", pa.string()), attack)


def scenario_labels(df: pd.DataFrame) -> pd.Series:
    """A short label per row naming the scenario by the scenario columns that vary.

    ``digits`` when everything but the defense and attack is fixed;
    ``partition=split protocol=fedbcd`` when a sweep crosses partitions and protocols.
    """
    cols = [c for c in SCENARIO_COLUMNS if c in df.columns]
    varying = [c for c in cols if df[c].nunique(dropna=False) > 1]
    if not varying:
        first = str(df["dataset"].iloc[0]) if "dataset" in df and len(df) else "all"
        return pd.Series(pd.Categorical([first] * len(df)), index=df.index)
    codes = df.groupby(varying, dropna=False, observed=True, sort=True).ngroup().to_numpy()
    firsts = df[varying].assign(_code=codes).drop_duplicates("_code").sort_values("_code")
    for column in reversed(list(varying)):  # drop columns the others determine
        rest = [c for c in varying if c != column]
        if rest and not firsts[rest].astype(str).duplicated().any():
            varying = rest
    names = [  # ``setting`` is already ``field=value`` pairs
        " ".join(str(row[c]) if c == "setting" else f"{c}={row[c]}" for c in varying)
        for row in firsts.to_dict("records")
    ]
    return pd.Series(pd.Categorical.from_codes(codes, categories=names), index=df.index)


def as_text(column: pd.Series) -> np.ndarray:
    """``column.astype(str).to_numpy()`` (an object array of ``str``, NaN where missing),
    each category converted once instead of once per row.

    Why: pandas 3 stores ``astype(str)`` as an Arrow string array, built from one Python
    string per row and converted back by ``to_numpy``; on a million categorical rows that
    took over a second per column, where taking the categories' strings by code takes ms.
    """
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.astype(str).to_numpy()
    names = np.asarray(column.cat.categories.astype(str), dtype=object)
    codes = column.cat.codes.to_numpy()
    out = names[codes] if len(names) else np.full(len(codes), np.nan, dtype=object)
    out[codes < 0] = np.nan
    return out


def as_str(column: pd.Series) -> pd.Series:
    """``column.astype(str)`` (pandas' ``str`` dtype, missing where missing), a categorical
    taken from its categories' strings by code in Arrow instead of one Python string per
    row: on the million rows of ``by_axis.per_training`` 0.3 s became 0.01 s."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.astype(str)
    names = pa.array(column.cat.categories.astype(str).tolist(), pa.large_string())
    codes = column.cat.codes.to_numpy()
    picked = names.take(pa.array(codes, mask=codes < 0))
    return pd.Series(pd.array(picked, dtype=pd.StringDtype(na_value=np.nan)), index=column.index)


def read_flat(sweep_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """The sweep's records with one typed column per varying spec field, and those fields.

    ``lr``, ``protocol_params.q``… as columns, from ``spec_json`` and the sweep's
    ``manifest.json`` (analysis/axes.py); the Parquet files are not changed.
    """
    from analysis.axes import flatten

    return flatten(read_records(sweep_dir), read_manifest(sweep_dir))
