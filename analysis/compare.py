"""``--compare AXIS=A:B``: which records are arm A, which are arm B, and what they share.

Read "from A to B": every difference the analysis prints is **B − A**
(``protocol=fedsgd:fedbcd`` gives FedBCD − FedSGD; VFLAIR's "splitVFL − aggVFL" is
``partition=agg:split``). The axis is any spec field, dotted into parameter mappings
(``protocol``, ``aligned_ratio``, ``ssl_variant``, ``split_params.alpha``,
``dataset_params.n_informative``…), read from each record's ``spec_json``.

Two trainings pair when their specs differ only in the axis and the fields that belong to
it (``protocol_params.*`` with ``protocol``; the dataset's own model, lr, epochs… with
``dataset``): the rest is their *context*, held fixed by every comparison.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainables.errors import ConfigError
from trainables.results.manifest import NESTED_FIELDS

# axis -> further spec fields that belong to it (cut from the context with it)
AXES: dict[str, tuple[str, ...]] = {
    "protocol": ("protocol_params",),
    "model": ("model_params", "hidden"),
    "n_parties": ("split_scheme", "split_params"),
    "split_scheme": ("split_params",),
    "aligned_ratio": ("n_aligned",),
    "dataset": ("dataset_params", "model", "model_params", "lr", "epochs", "batch_size", "hidden"),
}
# spec fields that are not the context: the cell (defense), the unit (seed), what an
# attack row already names (a training-time attack), and where it ran
NOT_CONTEXT = ("seed", "defense", "defense_param", "defense_params", "stack", "train_attack",
               "train_attack_params", "train_attack_adapt", "device")  # fmt: skip


# per record: its arm (0 = A, 1 = B, -1 neither), its context's code; the contexts' labels
Arms = tuple[np.ndarray, np.ndarray, list[str]]


@dataclass(frozen=True)
class Compare:
    axis: str
    a: str
    b: str

    @property
    def text(self) -> str:
        return f"{self.axis}={self.a}:{self.b}"

    @property
    def label(self) -> str:
        """What every Δ is: B − A."""
        return f"{self.b} − {self.a}"

    @property
    def key(self) -> str:
        """The comparison in file names: ``contrast_<key>.csv``, ``dcs_gap_<key>.png``
        (``ssl_variant_local_simsiam_vs_hssl_simsiam``): by axis and both levels, so that
        two comparisons on one axis never write the same file."""
        text = f"{self.axis}_{self.a}_vs_{self.b}"
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text)


def spec_fields() -> list[str]:
    from trainables.spec import TrialSpec

    return list(TrialSpec.model_fields)


EVERY = "*"  # ``AXIS=REF:*``: every other level of the axis against REF


def parse_group(text: str) -> tuple[str, str, list[str]]:
    """``AXIS=REF:B,C,…`` (or ``AXIS=REF:*``) → (axis, REF, [B, C, …] or ["*"]); each
    level is contrasted with the reference. ConfigError naming what is allowed."""
    axis, sep, values = text.partition("=")
    ref, sep2, rest = values.partition(":")
    levels = [v.strip() for v in rest.split(",")]
    if not sep or not sep2 or not ref or not all(levels):
        raise ConfigError(
            f"--compare {text!r}: expected AXIS=A:B (B − A), AXIS=REF:B,C (each level − REF) "
            "or AXIS=REF:* (every other level), e.g. protocol=fedsgd:fedbcd"
        )
    if EVERY in levels and levels != [EVERY]:
        raise ConfigError(f"--compare {text!r}: '*' stands alone (AXIS=REF:*)")
    twice = sorted({v for v in levels if levels.count(v) > 1})
    if twice:
        raise ConfigError(f"--compare {text!r}: {', '.join(twice)} listed twice")
    for level in levels if levels != [EVERY] else []:
        parse_compare(f"{axis}={ref}:{level}")  # the axis and each pair checked
    if levels == [EVERY]:
        check_axis(axis, text)  # the levels come from the records or the plan
    return axis, ref, levels


def parse_compares(texts: Iterable[str], levels: Callable[[str], list[object]]) -> list[Compare]:
    """Every comparison ``texts`` ask for, in order: one per (REF, level); ``*`` takes
    ``levels(axis)`` (the values the records or the plan hold) other than REF. The same
    comparison asked twice is a ConfigError, so is a ``*`` with no other level."""
    out: list[Compare] = []
    for text in texts:
        axis, ref, wanted = parse_group(text)
        if wanted == [EVERY]:
            probe = Compare(axis, ref, "\0")
            present = [v for v in levels(axis) if arm_of(v, probe) != "a"]
            wanted = list(dict.fromkeys(_level_text(v) for v in present))
            if not wanted:
                raise ConfigError(f"--compare {text!r}: no level of {axis} besides {ref!r}")
        for level in wanted:
            compare = Compare(axis, ref, level)
            if compare in out:
                raise ConfigError(f"--compare {compare.text}: asked for twice")
            out.append(compare)
    return out


def _level_text(value: object) -> str:
    """A level as ``--compare`` would name it: ``0.2``, ``fedbcd`` (``axes.show``)."""
    from analysis.axes import show

    return json.dumps(value) if isinstance(value, dict | list) else show(value)


def record_levels(rows: pd.DataFrame) -> Callable[[str], list[object]]:
    """``parse_compares``' levels from records: an axis's values in their specs (first
    seen first); none when the records have no such field."""
    from analysis.axes import parsed_specs

    def levels(axis: str) -> list[object]:
        if "spec_json" not in rows.columns or not len(rows):
            return []
        table, codes = parsed_specs(rows)
        if axis not in table.columns:
            return []
        used = table[axis].iloc[np.unique(codes.to_numpy())]
        return [v for v in dict.fromkeys(used.tolist()) if v is not None and v == v]

    return levels


def check_axis(axis: str, text: str) -> None:
    """ConfigError unless ``axis`` is a spec field a comparison can be on."""
    fields = spec_fields()
    head, dot, inner = axis.partition(".")
    known = axis in fields if not dot else head in NESTED_FIELDS and bool(inner)
    if not known or axis in ("seed", "defense", "defense_param", "stack"):
        nested = ", ".join(f"{f}.<key>" for f in NESTED_FIELDS)
        plain = ", ".join(f for f in fields if f not in (*NESTED_FIELDS, "seed", "stack"))
        raise ConfigError(
            f"--compare {text!r}: axis {axis!r} is not one of the spec's fields: {plain}; "
            f"or {nested} (seed and the defense are what a comparison pairs over)"
        )


def parse_compare(text: str) -> Compare:
    """``axis=A:B`` → Compare; ConfigError naming what is allowed. Whether the records
    hold both values is checked when they are read (``row_arms``)."""
    axis, sep, values = text.partition("=")
    a, sep2, b = values.partition(":")
    if not sep or not sep2 or not a or not b:
        raise ConfigError(f"--compare {text!r}: expected AXIS=A:B, e.g. protocol=fedsgd:fedbcd")
    check_axis(axis, text)
    if a == b:
        raise ConfigError(f"--compare {text!r}: A and B are the same value")
    return Compare(axis, a, b)


def companions(axis: str, columns: Iterable[str]) -> list[str]:
    """The flat spec columns that belong to ``axis`` (itself included)."""
    names = (axis, *AXES.get(axis, ()), f"{axis}_params")
    return [c for c in columns if any(c == n or c.startswith(n + ".") for n in names)]


def arm_of(value: object, compare: Compare) -> str | None:
    """``"a"``, ``"b"`` or None: the value as written (``0.2`` matches ``0.20``)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    for arm, text in (("a", compare.a), ("b", compare.b)):
        if str(value) == text or json.dumps(value) == text:
            return arm
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                if float(text) == float(value):
                    return arm
            except ValueError:
                pass
    return None


def context_of(table: pd.DataFrame, compare: Compare) -> tuple[np.ndarray, list[str]]:
    """Per flat spec (a row of ``table``): its context's code, and each context's label:
    the context fields that differ between contexts (one determined by the others, like a
    dataset's epochs, left out), ``dataset`` alone when there is one context."""
    skip = set(companions(compare.axis, table.columns))
    columns = [
        c
        for c in table.columns
        if c not in skip and not any(c == n or c.startswith(n + ".") for n in NOT_CONTEXT)
    ]
    rest = table[columns].astype(object).where(table[columns].notna(), None)
    keys = [json.dumps(row, sort_keys=True, default=str) for row in rest.to_dict("records")]
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object))
    first = {key: i for i, key in reversed(list(enumerate(keys)))}
    firsts = rest.iloc[[first[u] for u in uniques]].reset_index(drop=True)
    varying = [c for c in columns if firsts[c].astype(str).nunique() > 1]
    for column in list(reversed(varying)):  # drop fields the others determine
        others = [c for c in varying if c != column]
        if others and not firsts[others].astype(str).duplicated().any():
            varying = others
    if not varying:  # one context
        name = str(firsts["dataset"].iloc[0]) if "dataset" in firsts and len(firsts) else "all"
        return np.asarray(codes), [name] * len(uniques)
    labels = [" ".join(f"{c}={row[c]}" for c in varying) for row in firsts.to_dict("records")]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):  # never two contexts under one name
        seen[label] = seen.get(label, 0) + 1
        labels[i] = label if seen[label] == 1 else f"{label} #{seen[label]}"
    return np.asarray(codes), labels


def row_arms(rows: pd.DataFrame, compare: Compare) -> Arms:
    """Per row of ``rows`` (records with ``spec_json``): its arm (0 = A, 1 = B, -1 neither)
    and its context's code, and the contexts' labels. Integer codes, each distinct spec
    parsed once: a million rows group as integers. ConfigError when the axis or one of
    its values is absent."""
    from analysis.axes import parsed_specs

    if "spec_json" not in rows.columns or rows["spec_json"].isna().any():
        raise ConfigError(
            f"--compare {compare.text}: records without spec_json cannot be paired; "
            "re-run the sweep with this engine"
        )
    table, codes = parsed_specs(rows)
    if compare.axis not in table.columns:
        varying = [c for c in table.columns if table[c].astype(str).nunique() > 1]
        raise ConfigError(
            f"--compare {compare.text}: no record's spec has {compare.axis!r}; fields that "
            f"vary in these records: {', '.join(varying) or 'none'}"
        )
    sides = {"a": 0, "b": 1, None: -1}
    arms = np.asarray([sides[arm_of(v, compare)] for v in table[compare.axis]], dtype=np.int8)
    used = np.unique(codes.to_numpy())
    for value, arm in ((compare.a, 0), (compare.b, 1)):
        if arm not in set(arms[used].tolist()):
            seen = sorted({str(v) for v in table[compare.axis].iloc[used]})
            raise ConfigError(
                f"--compare {compare.text}: no records with {compare.axis}={value!r}; "
                f"present: {', '.join(seen) or 'none'}"
            )
    context_codes, labels = context_of(table, compare)
    code = codes.to_numpy()
    return arms[code], context_codes[code], labels
