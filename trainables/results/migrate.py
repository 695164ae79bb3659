"""Records of schema version 1 read as version 2: the one migration readers apply.

Version 1 files (written before ``SCHEMA_VERSION`` 2) have no ``attack_label``,
``attack_preset``, ``attack_adapted`` or ``spec`` column; a reader with RECORD_SCHEMA sees
nulls there. They are filled from what version 1 kept: the label, preset and adapted
flag from the row's ``extra`` JSON (``Attack.record_extra``), the label falling back to
``attack``; ``spec`` from ``spec_json``. Rows of version 2 are left as they are, so the
migration is a no-op on a folder of new files and can run on any mix.

LRB rows written before its baseline became its trigger on an unattacked twin
(``trainables/vfl/twins.py``; such rows have no ``scored_rows`` in ``extra``) had the
backdoored model's own untriggered rows as ``ap_chance``: another meaning, which a folder
resumed across that change would pool with the new one. They read as unknown (null
chance, advantage and error); their ``ap`` stands.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trainables.records import RECORD_SCHEMA, spec_array

NEW_COLUMNS = ("attack_label", "attack_preset", "attack_adapted", "spec")
OLD_BASELINE = ("ap_chance", "ap_advantage", "ap_advantage_se")
TWIN_BASELINED = "lrb"  # the attack whose baseline moved to a twin (then the only one)


def migrate(table: pa.Table) -> pa.Table:
    """``table`` with version 2's columns filled on rows that a version 1 file gave, and
    old LRB baselines unknown."""
    table = _old_backdoor_baselines(table)
    present = [c for c in NEW_COLUMNS if c in table.column_names]
    if "attack_label" in present and table.column("attack_label").null_count:
        # what version 1 kept, for every row; a version 2 row's own values win (coalesce)
        n = table.num_rows
        extras = table.column("extra").to_pylist() if "extra" in table.column_names else [None] * n
        names = table.column("attack").to_pylist() if "attack" in table.column_names else [None] * n
        parsed = [_json(e) for e in extras]
        filled = {
            "attack_label": [
                str(x.get("attack_label") or a or "none")
                for x, a in zip(parsed, names, strict=True)
            ],
            "attack_preset": [x.get("attack_preset") or None for x in parsed],
            "attack_adapted": ["adapted" in x for x in parsed],
        }
        for column, values in filled.items():
            if column in present:
                field = RECORD_SCHEMA.field(column)
                merged = pc.coalesce(table.column(column), pa.array(values, type=field.type))
                table = table.set_column(table.column_names.index(column), field, merged)
    return _fill_spec(table) if "spec" in present else table


def _old_backdoor_baselines(table: pa.Table) -> pa.Table:
    """LRB rows without ``scored_rows`` in ``extra`` with a null baseline (module doc)."""
    if not {"attack", "extra", *OLD_BASELINE} <= set(table.column_names):
        return table
    lrb = pc.fill_null(pc.equal(table.column("attack"), TWIN_BASELINED), False)
    if not pc.any(lrb).as_py():
        return table
    at = pc.indices_nonzero(lrb)  # the few LRB rows' extra only: 1M rows' would be 0.16 s
    new = pc.fill_null(
        pc.match_substring(pc.take(table.column("extra"), at), '"scored_rows"'), False
    )
    old_at = pc.filter(at, pc.invert(new)).to_numpy()
    if not len(old_at):
        return table
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[old_at] = True
    old = pa.array(mask)
    for column in OLD_BASELINE:
        at, field = table.column_names.index(column), table.schema.field(column)
        nulls = pc.if_else(old, pa.scalar(None, field.type), table.column(column))
        table = table.set_column(at, field, nulls)
    return table


def _fill_spec(table: pa.Table) -> pa.Table:
    spec = table.column("spec")
    if spec.null_count == 0 or "spec_json" not in table.column_names:
        return table
    missing = pc.is_null(spec)
    texts = pc.if_else(missing, table.column("spec_json"), None).to_pylist()
    merged = pc.if_else(missing, spec_array(texts), spec)
    at = table.column_names.index("spec")
    return table.set_column(at, RECORD_SCHEMA.field("spec"), merged)


def _json(text: object) -> dict:
    try:
        value = json.loads(str(text)) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
