"""MLflow runs of a sweep: one parent run per sweep folder, one child run per training.

Why a sync from the records instead of logging from the Tune callback: the Parquet
records are the source of truth and survive a killed driver; syncing them after the
sweep (and again on every re-run) is idempotent and resume-safe — a training whose
``trial_id`` already has a child is skipped, a child recorded as failed is updated when
a re-run succeeded — so a resumed sweep never duplicates a child. MLflow is imported
lazily: it costs seconds, and sweeps with ``--no-mlflow`` never pay it.

Why in ``analysis``: the sync only reads the results folder (``trainables/results``), and
both sides publish there — the sweep after every run (``sync_after_sweep``, called by
``sweep_engine/cli.py``), the analysis with its report (``log_analysis``). The engine
imports the analysis, never the reverse.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from analysis.completeness import completeness
from analysis.load import attack_labels
from analysis.mlflow_store import create_store
from trainables.records import RECORD_SCHEMA
from trainables.results.checks import Verified, read_verified
from trainables.results.layout import training_status
from trainables.results.manifest import flat_spec, read_manifest

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

ROLE, SWEEP_KEY, SWEEP_DIR = "vflsweep.role", "vflsweep.sweep_key", "vflsweep.sweep_dir"
PAGE = 1000
MAX_PARAM = 6000
SCALARS = ("mp", "val_mp", "rounds", "comm_bytes", "train_seconds", "epsilon", "rounds_to_target")


@dataclass
class SyncResult:
    experiment_id: str
    parent_run_id: str
    created: int = 0
    updated: int = 0
    children: dict[str, str] = field(default_factory=dict)  # trial_id -> run_id


def default_uri(results: Path) -> str:
    """``sqlite:///<results>/mlflow.db``: MLflow 3's file store is deprecated."""
    return f"sqlite:///{results.resolve()}/mlflow.db"


def client_for(uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient

    create_store(uri)
    return MlflowClient(tracking_uri=uri)


def experiment_id(client: MlflowClient, name: str, uri: str, results: Path) -> str:
    """The sweep's experiment (named after the sweep); artifacts next to a sqlite store."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    location = (results / "mlartifacts").resolve().as_uri() if uri.startswith("sqlite:") else None
    try:
        return str(client.create_experiment(name, artifact_location=location))
    except MlflowException:  # created concurrently by another process
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def sweep_key(sweep_dir: Path) -> str:
    """Tag value naming the sweep folder (a hash: filter strings cannot quote every path)."""
    return hashlib.sha1(str(sweep_dir.resolve()).encode()).hexdigest()[:16]


def parent_run(client: MlflowClient, exp_id: str, sweep_dir: Path) -> str:
    key = sweep_key(sweep_dir)
    runs = client.search_runs(
        [exp_id], f"tags.`{ROLE}` = 'parent' and tags.`{SWEEP_KEY}` = '{key}'", max_results=1
    )
    if runs:
        return str(runs[0].info.run_id)
    tags = {ROLE: "parent", SWEEP_KEY: key, SWEEP_DIR: str(sweep_dir.resolve())}
    return str(client.create_run(exp_id, tags=tags, run_name=sweep_dir.name).info.run_id)


def children(client: MlflowClient, exp_id: str, parent: str) -> dict[str, tuple[str, str, str]]:
    """trial_id -> (run_id, status tag, run status) of the parent's existing children; a
    run still ``RUNNING`` was cut short while being logged (a killed sync)."""
    out: dict[str, tuple[str, str, str]] = {}
    token = None
    while True:
        page = client.search_runs(
            [exp_id], f"tags.`mlflow.parentRunId` = '{parent}'", max_results=PAGE, page_token=token
        )
        for run in page:
            tags = run.data.tags
            out[tags.get("trial_id", "")] = (
                run.info.run_id,
                tags.get("status", ""),
                run.info.status,
            )
        token = page.token
        if not token:
            return out


def _finite(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _spec(rows: pd.DataFrame) -> dict[str, Any]:
    """One training's resolved spec (its clean row's ``spec_json``; {} if none)."""
    clean = rows[rows["attack"] == "none"]
    head = (clean if len(clean) else rows).iloc[0]
    return json.loads(str(head["spec_json"])) if _finite(head["spec_json"]) else {}


def training_payload(rows: pd.DataFrame) -> tuple[dict[str, str], dict[str, float], dict]:
    """(params, metrics, tags) of one training from its record rows."""
    clean = rows[rows["attack"] == "none"]
    head = (clean if len(clean) else rows).iloc[0]
    spec = _spec(rows)
    params = {
        k: (v if isinstance(v, str) else json.dumps(v, sort_keys=True))[:MAX_PARAM]
        for k, v in spec.items()
    }
    metrics = {k: float(head[k]) for k in SCALARS if k in head and _finite(head[k])}
    for attack in rows[rows["attack"] != "none"].itertuples():
        if _finite(attack.ap):
            metrics[metric_key("ap", attack.attack)] = float(attack.ap)
        if _finite(attack.mp):
            metrics[metric_key("mp", attack.attack)] = float(attack.mp)
    status = training_status(set(rows["status"].astype(str)))  # ok, stopped or error
    tags = {
        "trial_id": str(head["trial_id"]),
        "config_hash": str(head["config_hash"]),
        "setting_hash": str(head["setting_hash"]),
        "status": status,
        "defense": str(head["defense"]),
        "attacks": ",".join(str(a) for a in rows["attack"] if a != "none"),
    }
    if status == "error":
        tags["error"] = str(rows["error"].iloc[0])[:5000]
    return params, metrics, tags


def varying_fields(specs: list[dict[str, Any]], manifest: dict[str, Any] | None) -> list[str]:
    """The flat spec fields whose value differs between the sweep's trainings: from the
    manifest's experiment (the whole plan, so a name does not change as records arrive),
    else from the records' specs. ``seed`` and the attacks are named apart."""
    fields = ((manifest or {}).get("experiment") or {}).get("fields")
    if fields:
        names = [n for n, values in fields.items() if len(values) > 1]
    else:
        flat = [flat_spec(s) for s in specs]
        keys = sorted({k for f in flat for k in f})
        names = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flat}) > 1]
    return [n for n in names if n not in ("seed", "attacks")]


def run_name(spec: dict[str, Any], varying: list[str], trial_id: str) -> str:
    """A readable child name from the fields that vary in the sweep:
    ``ssl_variant=hssl_simsiam defense=iso@25 seed2 1a2b3c4d`` (a field that is the same
    in every training tells runs apart no better than the id)."""
    flat = flat_spec(spec)
    parts = []
    for name in varying:
        if name == "defense_param" and "defense" in varying:
            continue  # folded into the defense: ``gdp@0.1``
        value = flat.get(name)
        if name == "defense" and value != "none":
            value = f"{value}@{_fmt(flat.get('defense_param'))}"
        parts.append(f"{name}={_fmt(value) if value is not None else 'none'}")
    return " ".join([*parts, f"seed{spec.get('seed', '')}", trial_id[:8]])


def log_child(
    client: MlflowClient,
    exp_id: str,
    parent: str,
    rows: pd.DataFrame,
    run_id: str | None,
    varying: Sequence[str] = (),
) -> str:
    """Create (or, for ``run_id``, complete) the child run of one training; its name shows
    the ``varying`` fields (``varying_fields``)."""
    from mlflow.entities import Metric, Param

    params, metrics, tags = training_payload(rows)
    stamp = int(pd.Timestamp(rows["created_at"].iloc[0]).timestamp() * 1000)
    if run_id is None:
        tags = {**tags, "mlflow.parentRunId": parent}
        name = run_name(_spec(rows), list(varying), tags["trial_id"])
        run = client.create_run(exp_id, start_time=stamp, tags=tags, run_name=name)
        run_id = str(run.info.run_id)
    else:
        for key, value in tags.items():
            client.set_tag(run_id, key, value)
    # the same values again for a run completed later: MLflow accepts an unchanged param
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    client.log_batch(run_id, metrics=[Metric(k, v, stamp, 0) for k, v in metrics.items()])
    # a training stopped early (a scheduler, a pruner, halving) finished: it did not fail
    client.set_terminated(run_id, "FAILED" if tags["status"] == "error" else "FINISHED")
    return run_id


def sync_sweep(sweep_dir: Path, uri: str, verified: Verified | None = None) -> SyncResult:
    """Make MLflow hold one child per recorded training under the sweep's parent run.
    ``verified``: the sweep's records, already read and verified by the caller."""
    from mlflow.entities import Metric

    client = client_for(uri)
    exp_id = experiment_id(client, sweep_dir.name, uri, sweep_dir.parent)
    parent = parent_run(client, exp_id, sweep_dir)
    existing = children(client, exp_id, parent)
    result = SyncResult(exp_id, parent, children={t: k[0] for t, k in existing.items()})
    # each attack by its label: ``pmc`` and ``pmc@adapted`` are two metrics of one training
    # every column but ``spec`` (a struct per row; ``spec_json`` holds the same)
    columns = [name for name in RECORD_SCHEMA.names if name != "spec"]
    if verified is None:
        with warnings.catch_warnings():  # the analysis and status name damaged files
            warnings.simplefilter("ignore")
            verified = read_verified(sweep_dir / "records", columns)
    records = attack_labels(verified.table.select(columns)).to_pandas()
    records.attrs["damaged"] = {str(p): why for p, why in verified.damaged.items()}
    statuses = {}
    manifest = read_manifest(sweep_dir)
    groups = list(records.groupby("trial_id", sort=False))
    varying = varying_fields([_spec(rows) for _, rows in groups], manifest)
    for trial_id, rows in groups:
        statuses[trial_id] = training_status(set(rows["status"].astype(str)))
        ok = statuses[trial_id] != "error"
        known = existing.get(str(trial_id))
        if known is None:
            result.children[str(trial_id)] = log_child(client, exp_id, parent, rows, None, varying)
            result.created += 1
        elif (ok and known[1] == "error") or known[2] == "RUNNING":  # fixed, or cut short
            log_child(client, exp_id, parent, rows, known[0])
            result.updated += 1
    n_ok = sum(s == "ok" for s in statuses.values())
    n_stopped = sum(s == "stopped" for s in statuses.values())
    counts = {"trainings": len(statuses), "trainings_ok": n_ok, "records": len(records)}
    counts["trainings_error"] = len(statuses) - n_ok - n_stopped
    counts["trainings_stopped"] = n_stopped
    found = completeness(records, manifest) if len(records) else None
    if found is not None:  # how complete the sweep is, on the parent run
        counts["files_damaged"] = found["damaged"]
        if found["planned"] is not None:
            counts["trainings_planned"] = found["planned"]
        client.set_tag(parent, "vflsweep.completeness", found["line"][:5000])
    client.log_batch(parent, metrics=[Metric(k, float(v), _now(), 0) for k, v in counts.items()])
    client.set_terminated(parent, "FINISHED")
    return result


def _now() -> int:
    return int(time.time() * 1000)


def sync_after_sweep(
    sweep_dir: Path, uri: str | None, results: Path, verified: Verified | None = None
) -> None:
    """The sweep CLI's hook: sync, print one line; a tracking failure never fails a sweep."""
    target = uri or default_uri(results)
    try:
        result = sync_sweep(sweep_dir, target, verified)
    except Exception as err:  # the records are safe; the next run syncs again
        print(f"warning: MLflow sync to {target} failed ({err}); re-run to sync", file=sys.stderr)
        return
    print(
        f"mlflow: {target} experiment {result.experiment_id} parent run {result.parent_run_id}: "
        f"{result.created} new, {result.updated} updated, {len(result.children)} child runs",
        flush=True,
    )


def metric_key(*parts: object) -> str:
    """An MLflow-legal metric name from parts (``cdcs/gdp/0.1``)."""
    text = "/".join(_fmt(p) for p in parts if _fmt(p))
    return re.sub(r"[^\w.\- :/]", "_", text)


def _fmt(part: object) -> str:
    if isinstance(part, float):
        return "" if math.isnan(part) else f"{part:g}"
    return str(part)


def log_analysis(
    sweep_dir: Path,
    uri: str,
    report_dir: Path,
    ranking: pd.DataFrame,
    dcs: pd.DataFrame,
    best: dict[str, Any] | None = None,
) -> dict[str, object]:
    """Report folder as artifacts and the ranking as metrics on the parent; DCS per attack
    on each training's child run; per metric of ``best`` (best.json) the best cell's mean
    as ``best/<metric>`` and its label as the tag ``vflsweep.best/<metric>``."""
    from mlflow.entities import Metric

    synced = sync_sweep(sweep_dir, uri)
    client = client_for(uri)
    parent, stamp = synced.parent_run_id, _now()
    client.log_artifacts(parent, str(report_dir), "report")
    bests = {  # a metric that never varied has no best (best.json says so)
        name: entry
        for name, entry in (best or {}).get("metrics", {}).items()
        if entry.get("best") is not None
    }
    for name, entry in bests.items():
        client.set_tag(parent, metric_key("vflsweep.best", name), entry["best"]["cell"][:5000])
    scenarios = ranking["scenario"].astype(str).nunique()
    metrics = [Metric(metric_key("best", n), e["best"]["mean"], stamp, 0) for n, e in bests.items()]
    for row in ranking[ranking["cdcs"].notna()].itertuples():
        where = (row.scenario,) if scenarios > 1 else ()
        chance_aware = [("ca_cdcs", getattr(row, "ca_cdcs", None))]
        chance_aware.append(("ca_group", getattr(row, "ca_group", None)))
        for name, value in (("cdcs", row.cdcs), ("rank", row.rank), *chance_aware):
            if value is None or not math.isfinite(float(value)):
                continue
            key = metric_key(name, *where, row.defense, row.strength)
            metrics.append(Metric(key, float(value), stamp, 0))
    for start in range(0, len(metrics), 1000):
        client.log_batch(parent, metrics=metrics[start : start + 1000])
    scored = dcs.loc[dcs["dcs"].notna(), ["trial_id", "attack", "dcs"]]
    logged = 0
    for trial_id, rows in scored.groupby("trial_id", observed=True):
        run_id = synced.children.get(str(trial_id))
        if run_id is not None:
            pairs = zip(rows["attack"], rows["dcs"], strict=True)
            batch = [Metric(metric_key("dcs", a), float(v), stamp, 0) for a, v in pairs]
            client.log_batch(run_id, metrics=batch)
            logged += 1
    ranked = len(metrics) - len(bests)
    return {
        "parent_run_id": parent,
        "ranking_metrics": ranked,
        "best_metrics": len(bests),
        "children_with_dcs": logged,
    }
