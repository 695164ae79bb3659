"""Synthetic records: hand-built rows for tests, and millions of rows for the benchmark."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from analysis.load import table_to_frame
from trainables.records import RECORD_SCHEMA

BASE: dict[str, Any] = {
    "sweep": "t",
    "dataset": "digits",
    "n_parties": 2,
    "partition": "agg",
    "protocol": "fedsgd",
    "protocol_params": "{}",
    "model": "mlp2",
    "defense": "none",
    "defense_param": None,
    "defense_party": "",
    "attack": "none",
    "attack_type": "none",
    "attacker_party": 1,
    "ssl_variant": "none",
    "aligned_ratio": 1.0,
    "n_labeled": 100,
    "seed": 0,
    "mp": None,
    "ap": None,
    "rounds": 10,
    "comm_bytes": 1000,
    "train_seconds": 1.0,
    "attack_seconds": 0.0,
    "status": "ok",
    "error": "",
    "engine_version": "0.1.0",
    "extra": "{}",
}


def row(**fields: Any) -> dict[str, Any]:
    """One record dict; trial_id/setting_hash/spec_json derived from the setting fields."""
    out = {**BASE, **fields}
    setting = {
        k: out[k] for k in ("dataset", "partition", "protocol", "protocol_params", "seed", "model")
    }
    setting["train_attack"] = fields.get("train_attack", "none")
    out.pop("train_attack", None)
    out.setdefault("setting_hash", "s-" + json.dumps(setting, sort_keys=True))
    spec = {**setting, "defense": out["defense"], "defense_param": out["defense_param"]}
    out.setdefault("trial_id", "t-" + json.dumps(spec, sort_keys=True))
    out.setdefault("config_hash", out["trial_id"])
    out.setdefault("spec_json", json.dumps(spec, sort_keys=True))
    return out


def training(
    mp: float, attacks: dict[str, tuple[str, float, float | None]] | None = None, **fields: Any
) -> list[dict[str, Any]]:
    """A training's rows: its clean row plus one per attack name -> (type, ap, mp or None)."""
    rows = [row(mp=mp, **fields)]
    for name, (kind, ap, attack_mp) in (attacks or {}).items():
        mp_row = mp if attack_mp is None else attack_mp
        rows.append(row(mp=mp_row, attack=name, attack_type=kind, ap=ap, **fields))
    return rows


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows → the DataFrame ``analysis.load`` would produce from Parquet."""
    import pyarrow as pa

    return table_to_frame(pa.Table.from_pylist(rows, schema=RECORD_SCHEMA))


SYN_ATTACKS = (  # (name, type, inference-time)
    ("ns", "LI", True),
    ("ds", "LI", True),
    ("dli", "LI", True),
    ("bli", "LI", True),
    ("pmc", "LI", True),
    ("mc", "LI", True),
    ("grn", "FR", True),
    ("tbm", "FR", True),
    ("nsb", "NTB", True),
    ("mf", "NTB", True),
    ("amc", "LI", False),
    ("lrb", "TB", False),
)


def synthetic_table(n_rows: int, seed: int = 0, n_defenses: int = 20, n_strengths: int = 10):
    """About ``n_rows`` records of a VFLAIR-shaped sweep as one Arrow table (numpy-built).

    4 scenarios (agg/split x fedsgd/fedbcd) x seeds x (none + defenses x strengths); each
    setting has one training with the 10 inference-time attacks (11 rows) and one training
    per training-time attack (1 row each). AP falls and MP drops with the strength; every
    attack row has a chance of 0.5 and the advantage over it.
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    n_cfg = 1 + n_defenses * n_strengths
    inference = [a for a in SYN_ATTACKS if a[2]]
    training_time = [a for a in SYN_ATTACKS if not a[2]]
    per_setting = n_cfg * (1 + len(inference) + len(training_time))
    n_seeds = max(1, round(n_rows / (4 * per_setting)))
    cfg = np.arange(n_cfg)
    defense = np.where(cfg == 0, "none", np.char.add("def", ((cfg - 1) // n_strengths).astype(str)))
    strength = np.where(cfg == 0, np.nan, 10.0 ** ((cfg - 1) % n_strengths - 4))
    # one "training kind" per row slot: (attack index or -1 for clean, training id offset)
    slots = [("none", "none", 0)] + [(a, t, 0) for a, t, _ in inference]
    slots += [(a, t, k + 1) for k, (a, t, _) in enumerate(training_time)]
    grids = np.meshgrid(np.arange(4), np.arange(n_seeds), cfg, np.arange(len(slots)), indexing="ij")
    scen, seeds, cfgs, slot = (g.ravel() for g in grids)
    attack = np.array([s[0] for s in slots])[slot]
    kind = np.array([s[1] for s in slots])[slot]
    train_kind = np.array([s[2] for s in slots])[slot]
    partition = np.where(scen % 2 == 0, "agg", "split")
    protocol = np.where(scen // 2 == 0, "fedsgd", "fedbcd")
    setting = (scen * n_seeds + seeds) * 3 + train_kind
    training = setting * n_cfg + cfgs
    power = np.nan_to_num(np.log10(strength[cfgs]) + 5, nan=0.0) / (n_strengths + 1)
    mp = 0.9 - 0.15 * power + rng.normal(0, 0.01, len(scen))
    ap = np.clip(0.8 - 0.6 * power + rng.normal(0, 0.05, len(scen)), 0, 1)
    spec = np.char.add(
        np.char.add('{"dataset":"mnist","partition":"', partition),
        np.char.add(
            np.char.add('","protocol":"', protocol), np.char.add('","seed":', seeds.astype(str))
        ),
    )
    spec = np.char.add(np.char.add(spec, ',"defense":"'), defense[cfgs])
    spec = np.char.add(
        np.char.add(spec, '","train_kind":'), np.char.add(train_kind.astype(str), "}")
    )
    columns = {
        "sweep": np.full(len(scen), "syn"),
        "trial_id": np.char.add("t", training.astype(str)),
        "setting_hash": np.char.add("s", setting.astype(str)),
        "dataset": np.full(len(scen), "mnist"),
        "n_parties": np.full(len(scen), 2, dtype=np.int32),
        "partition": partition,
        "protocol": protocol,
        "protocol_params": np.where(protocol == "fedbcd", '{"q": 5}', "{}"),
        "model": np.full(len(scen), "mlp2"),
        "defense": defense[cfgs],
        "defense_param": strength[cfgs],
        "attack": attack,
        "attack_type": kind,
        "seed": seeds.astype(np.int64),
        "mp": mp,
        "ap": np.where(attack == "none", np.nan, ap),
        # the baseline columns of chance.py: an AUC-like chance of 0.5 for every attack
        "ap_chance": np.where(attack == "none", np.nan, 0.5),
        "ap_advantage": np.where(attack == "none", np.nan, np.clip(2 * (ap - 0.5), 0, 1)),
        "ap_advantage_se": np.where(attack == "none", np.nan, 0.02),
        "ap_collapse": np.where(attack == "none", np.nan, rng.uniform(0, 1, len(scen))),
        "mp_se": np.sqrt(np.clip(mp * (1 - mp), 0, None) / 10_000),
        "status": np.full(len(scen), "ok"),
        "ssl_variant": np.full(len(scen), "none"),
        "aligned_ratio": np.ones(len(scen)),
        "n_labeled": np.full(len(scen), 60000, dtype=np.int64),
        "spec_json": spec,
        # LRB's rows as the engine writes them since its baseline is a twin's: with the
        # rows it scored (an LRB row without them reads as an old baseline: migrate.py)
        "extra": np.where(attack == "lrb", '{"scored_rows": 100}', "{}"),
    }
    columns["config_hash"] = columns["trial_id"]
    return pa.table({k: pa.array(v, from_pandas=True) for k, v in columns.items()})
