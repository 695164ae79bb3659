"""Records of schema version 1 read as version 2: the one migration readers apply.

Version 1 files (written before ``SCHEMA_VERSION`` 2) have no ``attack_label``,
``attack_preset``, ``attack_adapted`` or ``spec`` column; a reader with RECORD_SCHEMA sees
nulls there. They are filled from what version 1 kept: the label, preset and adapted
flag from the row's ``extra`` JSON (``Attack.record_extra``), the label falling back to
``attack``; ``spec`` from ``spec_json``. Rows of version 2 are left as they are, so the
migration is a no-op on a folder of new files and can run on any mix.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from trainables.records import RECORD_SCHEMA, spec_array

NEW_COLUMNS = ("attack_label", "attack_preset", "attack_adapted", "spec")


def migrate(table: pa.Table) -> pa.Table:
    """``table`` with version 2's columns filled on rows that a version 1 file gave."""
    present = [c for c in NEW_COLUMNS if c in table.column_names]
    if "attack_label" not in present or table.column("attack_label").null_count == 0:
        return table if "spec" not in present else _fill_spec(table)
    old = pc.is_null(table.column("attack_label"))
    extras = table.column("extra").to_pylist() if "extra" in table.column_names else None
    attacks = table.column("attack").to_pylist() if "attack" in table.column_names else None
    flags = old.to_pylist()
    label, preset, adapted = [], [], []
    cur_label = table.column("attack_label").to_pylist()
    cur_preset = table.column("attack_preset").to_pylist() if "attack_preset" in present else None
    cur_adapted = (
        table.column("attack_adapted").to_pylist() if "attack_adapted" in present else None
    )
    for i, is_old in enumerate(flags):
        if not is_old:
            label.append(cur_label[i])
            preset.append(cur_preset[i] if cur_preset else None)
            adapted.append(cur_adapted[i] if cur_adapted else False)
            continue
        extra = _json(extras[i] if extras else None)
        name = attacks[i] if attacks else None
        label.append(str(extra.get("attack_label") or name or "none"))
        preset.append(extra.get("attack_preset") or None)
        adapted.append("adapted" in extra)
    for column, values in (
        ("attack_label", label), ("attack_preset", preset), ("attack_adapted", adapted)
    ):  # fmt: skip
        if column in table.column_names:
            at = table.column_names.index(column)
            field = RECORD_SCHEMA.field(column)
            table = table.set_column(at, field, pa.array(values, type=field.type))
    return _fill_spec(table) if "spec" in present else table


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
