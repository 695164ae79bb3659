"""DCS gaps between two settings of one axis (VFLAIR: splitVFL − aggVFL, FedBCD − FedSGD).

``--compare partition=split:agg`` pairs each row of setting A with the row of setting B
that agrees on everything else: attack, defense, strength, seed, the other scenario
columns, and every other spec field (the spec JSON without the axis fields, cut once
per distinct spec, not per row, by a regex), so a sweep that also varies lr never pairs across lrs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.load import SCENARIO_COLUMNS
from trainables.errors import ConfigError

# axis -> spec fields that belong to it (dropped from the "everything else" key)
AXES: dict[str, tuple[str, ...]] = {
    "partition": ("partition",),
    "protocol": ("protocol", "protocol_params"),
    "model": ("model", "model_params", "hidden"),
    "n_parties": ("n_parties", "split_scheme"),
    "aligned_ratio": ("aligned_ratio",),
    "n_labeled": ("n_labeled",),
    "ssl_variant": ("ssl_variant",),
    "dataset": ("dataset", "dataset_params", "model", "lr", "epochs", "batch_size", "hidden"),
}
COMPANION_COLUMNS = {"protocol": ("protocol_params",)}
PAIR_COLUMNS = ["attack", "attack_type", "defense", "defense_param", "defense_party", "seed"]


@dataclass(frozen=True)
class Compare:
    axis: str
    a: str
    b: str

    @property
    def label(self) -> str:
        return f"{self.a} − {self.b}"


def parse_compare(text: str) -> Compare:
    """``axis=A:B`` → Compare; ConfigError naming what is allowed."""
    axis, sep, values = text.partition("=")
    a, sep2, b = values.partition(":")
    if not sep or not sep2 or not a or not b:
        raise ConfigError(f"--compare {text!r}: expected AXIS=A:B, e.g. partition=split:agg")
    if axis not in AXES:
        raise ConfigError(f"--compare {text!r}: axis {axis!r} is not one of {', '.join(AXES)}")
    if a == b:
        raise ConfigError(f"--compare {text!r}: A and B are the same value")
    return Compare(axis, a, b)


JSON_VALUE = r'(?:"(?:[^"\\]|\\.)*"|\{[^{}]*\}|\[[^\]]*\]|[^,}]*)'


def _rest_key(spec_json: pd.Series, axis: str) -> np.ndarray:
    """Per row: an integer code of its spec JSON with the axis fields cut out.

    The cut is one regex over the distinct spec strings (Arrow compute, not json.loads per
    row); rows whose specs differ only in the axis get the same code.
    """
    codes, uniques = pd.factorize(spec_json, use_na_sentinel=False)
    text = pa.array(np.asarray(uniques, dtype=object), type=pa.string())
    for name in AXES[axis]:
        text = pc.replace_substring_regex(text, f'"{name}":{JSON_VALUE}', "")
    _, rest = np.unique(np.asarray(text.to_pylist(), dtype=object), return_inverse=True)
    return rest[codes]


def dcs_gaps(dcs: pd.DataFrame, compare: Compare) -> pd.DataFrame:
    """One row per pair: keys, dcs_a, dcs_b, gap = dcs_a − dcs_b."""
    wanted = {*PAIR_COLUMNS, *SCENARIO_COLUMNS, "spec_json", "dcs"}
    rows = dcs.loc[dcs["dcs"].notna(), [c for c in dcs.columns if c in wanted]]
    codes, uniques = pd.factorize(rows[compare.axis], use_na_sentinel=False)
    names = np.asarray([str(u) for u in uniques], dtype=object)  # each distinct value once
    seen = set(names[np.unique(codes)])
    for value in (compare.a, compare.b):
        if value not in seen:
            raise ConfigError(
                f"--compare {compare.axis}={compare.a}:{compare.b}: no scored rows with "
                f"{compare.axis}={value!r}; present: {', '.join(sorted(seen)) or 'none'}"
            )
    others = [
        c
        for c in SCENARIO_COLUMNS
        if c != compare.axis and c not in COMPANION_COLUMNS.get(compare.axis, ())
    ]
    keys = [c for c in (*PAIR_COLUMNS, *others) if c in rows.columns]
    frame = rows[keys].copy()
    if "spec_json" in rows and rows["spec_json"].notna().all():
        # the spec without the axis already fixes seed, defense and every other setting
        group = pd.DataFrame(
            {"attack": rows["attack"], "rest": _rest_key(rows["spec_json"], compare.axis)}
        )
    else:
        group = frame
    pair_id = group.groupby(list(group.columns), observed=True, dropna=False).ngroup()
    dcs_values, pair_ids = rows["dcs"].to_numpy(), pair_id.to_numpy()
    is_a, is_b = (np.isin(codes, np.flatnonzero(names == v)) for v in (compare.a, compare.b))
    a = pd.Series(dcs_values[is_a]).groupby(pair_ids[is_a])
    b = pd.Series(dcs_values[is_b]).groupby(pair_ids[is_b])
    pairs = pd.concat([a.mean().rename("dcs_a"), b.mean().rename("dcs_b")], axis=1, join="inner")
    first = frame[keys].assign(pair_id=pair_id.to_numpy()).drop_duplicates("pair_id")
    out = first.set_index("pair_id").loc[pairs.index, keys].reset_index(drop=True)
    out["dcs_a"] = pairs["dcs_a"].to_numpy()
    out["dcs_b"] = pairs["dcs_b"].to_numpy()
    out["gap"] = out["dcs_a"] - out["dcs_b"]
    return out


def gap_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per attack type (and all): pairs, mean, median, share of positive gaps."""
    every = pairs.assign(attack_type="all")
    both = pd.concat([pairs, every], ignore_index=True)
    grouped = both.groupby("attack_type", sort=False)["gap"]
    return pd.DataFrame(
        {
            "n_pairs": grouped.size(),
            "mean_gap": grouped.mean(),
            "median_gap": grouped.median(),
            "share_positive": grouped.apply(lambda g: float((g > 0).mean())),
        }
    ).reset_index()
