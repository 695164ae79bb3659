"""What trainings and attack evaluations cost on this machine: a small cache the estimate reads.

Why a cache per machine: a wall-time estimate is only as good as its per-part seconds, and
those differ by an order of magnitude between a laptop and a cluster node, between digits
and adult, between NS (milliseconds) and PMC (seconds). Guessing them from constants gave
three estimates off by 2-6x (issue 30). So the parts are *measured here* and kept:

- ``probe`` (``estimate.py``) times one short training of each training class and one
  evaluation of each of its attacks, in this process, the first time a plan needs them;
- every finished sweep adds what its records say (``learn``): the seconds each training
  and each attack evaluation took on the actors, which the next estimate prefers.

The file is ``$VFLSWEEP_CACHE/costs-<machine>.json`` (default ``~/.cache/vflsweep``), one per
machine fingerprint (CPU model and count, memory, torch), so a copied home directory does not
carry a laptop's numbers to a server. Delete it to measure afresh.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainables.data.cache import cache_root

if TYPE_CHECKING:
    import pyarrow as pa

    from trainables.spec import TrialSpec

KEEP = 25  # observations kept per key (the newest): the median of these is the value
# 2: a probe keeps a class's pretraining apart ("pretrain"); version 1 held it in "fixed"
VERSION = 2


def fingerprint() -> str:
    """What makes two machines' seconds comparable: CPU model, CPUs, memory, torch."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    except (ValueError, OSError, AttributeError):
        mem = 0
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "none"
    blob = f"{model}|{os.cpu_count()}|{mem}|{torch}|{platform.machine()}"
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def cache_path() -> Path:
    return cache_root() / f"costs-{fingerprint()}.json"


@dataclass
class Costs:
    """Observed seconds by key; each value is the median of the newest ``KEEP`` samples.

    ``train[key]``: ``{"fixed": [...], "epoch": [...]}`` (seconds without and per epoch;
    a probe's also ``"pretrain"``: its pretraining seconds, in one process);
    ``attack[key]``: ``[...]`` seconds of one evaluation; ``source[key]``: ``sweep`` (from
    records on the actors, preferred) or ``probe`` (in this process).
    """

    train: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    attack: dict[str, list[float]] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    # -- reading ------------------------------------------------------------------------
    def training(self, key: str) -> tuple[float, float] | None:
        """(fixed seconds, seconds per epoch) of a training class, if measured."""
        got = self.train.get(key)
        if not got or not got.get("fixed"):
            return None
        return statistics.median(got["fixed"]), statistics.median(got.get("epoch") or [0.0])

    def pretraining(self, key: str) -> float:
        """A probe's pretraining seconds of a training class (in one process: the parties
        one after the other), 0 where none was kept apart (the actors' own numbers)."""
        got = (self.train.get(key) or {}).get("pretrain")
        return statistics.median(got) if got else 0.0

    def evaluation(self, key: str) -> float | None:
        got = self.attack.get(key)
        return statistics.median(got) if got else None

    # -- writing ------------------------------------------------------------------------
    def add_training(
        self, key: str, fixed: float, per_epoch: float, source: str, pretrain: float = 0.0
    ) -> None:
        if source == "probe" and self.source.get(f"train:{key}") == "sweep":
            return  # the actors' own numbers stay
        if source == "sweep" and self.source.get(f"train:{key}") == "probe":
            self.train.pop(key, None)  # measured where it runs: the probe's guess goes
        slot = self.train.setdefault(key, {"fixed": [], "epoch": []})
        slot["fixed"] = [*slot["fixed"], max(0.0, fixed)][-KEEP:]
        slot["epoch"] = [*slot["epoch"], max(0.0, per_epoch)][-KEEP:]
        if pretrain or "pretrain" in slot:  # kept apart: the actors pretrain side by side
            slot["pretrain"] = [*slot.get("pretrain", []), max(0.0, pretrain)][-KEEP:]
        self.source[f"train:{key}"] = source

    def add_evaluation(self, key: str, seconds: float, source: str) -> None:
        if source == "probe" and self.source.get(f"attack:{key}") == "sweep":
            return
        if source == "sweep" and self.source.get(f"attack:{key}") == "probe":
            self.attack.pop(key, None)
        self.attack[key] = [*self.attack.get(key, []), max(0.0, seconds)][-KEEP:]
        self.source[f"attack:{key}"] = source

    def save(self) -> None:
        """Atomically (a sweep and a plan may write at once; the last one wins whole)."""
        path = self.path or cache_path()
        data = {"version": VERSION, "train": self.train, "attack": self.attack}
        data["source"] = self.source
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".costs-", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: the estimate still works, it just measures again


def train_key(spec: TrialSpec) -> str:
    """What one training's seconds depend on, besides its epochs (not seeds, not the
    strength of its defense): its kind's shape, the defense and any training-time attack,
    and ``model_params`` (a tree's estimators, an SSL variant's pretraining epochs)."""
    fields = ("dataset", "dataset_params", "model", "hidden", "n_parties", "partition")
    more: tuple[str, ...] = (
        "protocol",
        "protocol_params",
        "batch_size",
        "ssl_variant",
        "aligned_ratio",
    )
    more += ("n_labeled", "defense", "train_attack", "optimizer", "kind", "model_params")
    dumped = spec.model_dump(mode="json")
    return json.dumps({k: dumped.get(k) for k in fields + more}, sort_keys=True, default=str)


def attack_key(attack: str, spec: TrialSpec) -> str:
    """An evaluation's cost depends on the attack, the rows and columns it sees."""
    params = json.dumps(dict(spec.dataset_params), sort_keys=True, default=str)
    return f"{attack}|{spec.dataset}|{params}|{spec.n_parties}|{spec.partition}"


def tuning_runs(extra: str) -> int:
    """Attack runs behind an adapted evaluation (each tuning trial on each of its folds,
    and the chosen setting, ``extra.adapted``); 0 for an evaluation at fixed settings."""
    if '"adapted":' not in extra:
        return 0
    adapted = json.loads(extra).get("adapted") or {}
    folds = max(1, int(adapted.get("folds", 1)))  # cv's k (records before cv: one holdout)
    return int(adapted.get("trials_run", 0)) * folds + 1


def load(path: Path | None = None) -> Costs:
    """The cache, or an empty one (missing, unreadable or another version: measure again)."""
    path = path or cache_path()
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return Costs(path=path)
    if not isinstance(data, dict) or data.get("version") not in (1, VERSION):
        return Costs(path=path)
    if data["version"] == 1:
        _drop_probed_pretraining(data)
    return Costs(
        train=dict(data.get("train", {})),
        attack=dict(data.get("attack", {})),
        source=dict(data.get("source", {})),
        path=path,
    )


def _drop_probed_pretraining(data: dict[str, Any]) -> None:
    """A version-1 cache: its probe's pretraining classes held their pretraining inside
    ``fixed`` (one process, not divided among parties that pretrain side by side), so
    they go and are probed again; everything else, the actors' numbers first, stays."""
    train, source = data.get("train", {}), data.get("source", {})
    for key in list(train):
        try:
            variant = json.loads(key).get("ssl_variant")
        except (ValueError, AttributeError):
            continue
        if variant not in (None, "none", "splitnn") and source.get(f"train:{key}") == "probe":
            del train[key]
            source.pop(f"train:{key}", None)


def _seconds(value: float | None) -> float:
    return math.nan if value is None else float(value)  # a null reads as NaN, as in pandas


def learn(sweep_dir: Path, costs: Costs | None = None, table: pa.Table | None = None) -> int:
    """Add what the records of ``sweep_dir`` say each training and evaluation cost on the
    actors; returns how many trainings were read. Error records are skipped. ``table``:
    the sweep's verified records when the caller has read them already (the CLI reads
    them once for this, the MLflow sync and the summary)."""
    from sweep_engine.sink import RecordSink
    from trainables.results.labels import adapted_label
    from trainables.spec import TrialSpec

    cols = ["trial_id", "attack", "train_seconds", "attack_seconds", "status", "spec_json"]
    cols += ["extra"]
    try:
        table = RecordSink(sweep_dir).read() if table is None else table
        data = table.select(cols).to_pydict()
    except (OSError, ValueError, KeyError):
        return 0
    # each finished training's rows, in order: plain lists, not a pandas group-by (whose
    # per-group indexing was 0.3 s per 1,000 trainings, at the end of every sweep)
    rows_of: dict[str, list[int]] = {}
    for i, (tid, status) in enumerate(zip(data["trial_id"], data["status"], strict=True)):
        if status == "ok":
            rows_of.setdefault(tid, []).append(i)
    if not rows_of:
        return 0
    costs = costs or load()
    n = 0
    for rows in rows_of.values():
        try:
            spec = TrialSpec.model_validate_json(data["spec_json"][rows[0]])
        except ValueError:
            continue
        seconds = _seconds(data["train_seconds"][rows[0]])
        epochs = int(spec.epochs or 0)
        # a sweep sees one length per class: the whole run goes to the per-epoch part
        costs.add_training(train_key(spec), 0.0 if epochs else seconds,
                           seconds / epochs if epochs else 0.0, "sweep")  # fmt: skip
        for i in rows:
            attack = data["attack"][i]
            if attack == "none" or attack == spec.train_attack:
                continue
            runs = tuning_runs(str(data["extra"][i]))  # an adapted evaluation: per run
            key = attack_key(adapted_label(attack) if runs else attack, spec)
            costs.add_evaluation(key, _seconds(data["attack_seconds"][i]) / max(1, runs), "sweep")
        n += 1
    costs.save()
    return n
