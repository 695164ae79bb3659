"""Frozen trial records and the one pyarrow schema that fixes their types
(docs/architecture.md, "Frozen records, one schema")."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from trainables.data.split import split_record
from trainables.sampling import main_task_se
from trainables.spec import TrialSpec

if TYPE_CHECKING:
    from trainables.attacks.harness import AttackOutcome
    from trainables.rounds import TrainResult

ENGINE_VERSION = "0.1.0"
# The record schema's version, in every file's metadata. 2 added ``attack_label``,
# ``attack_preset``, ``attack_adapted`` and the typed ``spec`` struct; files of version 1
# are read through one migration (``trainables/results/migrate.py``).
SCHEMA_VERSION = 2
SCHEMA_VERSION_KEY = b"vflsweep.schema_version"


def _arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a TrialSpec field: its scalar type; a mapping, a tuple or a
    stack entry as canonical JSON text (``"{\"q\": 5}"``)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _arrow_type(args[0])
    if origin is typing.Literal:
        return pa.int64() if all(isinstance(a, int) for a in args) else pa.string()
    if origin in (typing.Union, types.UnionType):
        return _arrow_type(args[0]) if len(args) == 1 else pa.string()
    return {bool: pa.bool_(), int: pa.int64(), float: pa.float64()}.get(annotation, pa.string())


# every TrialSpec field as a typed struct field: what tells two trainings apart, queryable
# (``spec.epochs``, ``spec.lr_decay``) by any Parquet client without parsing ``spec_json``
SPEC_TYPE = pa.struct(
    [(name, _arrow_type(f.annotation)) for name, f in TrialSpec.model_fields.items()]
)


@functools.lru_cache(maxsize=4096)
def spec_values(spec_json: str) -> tuple[tuple[str, object], ...]:
    """A spec's struct value from its JSON (cached: a pack's rows share a few specs)."""
    if not spec_json:
        return ()
    spec = json.loads(spec_json)
    out = []
    for field_ in SPEC_TYPE:
        value = spec.get(field_.name)
        if isinstance(value, dict | list):
            value = json.dumps(value, sort_keys=True)
        out.append((field_.name, value))
    return tuple(out)


def spec_array(spec_jsons: list[str | None]) -> pa.Array:
    """The ``spec`` column of rows with these ``spec_json`` values (null where none)."""
    return pa.array([dict(spec_values(s)) if s else None for s in spec_jsons], type=SPEC_TYPE)


RECORD_SCHEMA = pa.schema(
    [
        ("sweep", pa.string()),
        ("trial_id", pa.string()),
        ("config_hash", pa.string()),
        ("setting_hash", pa.string()),
        ("dataset", pa.string()),
        ("n_parties", pa.int32()),
        ("partition", pa.string()),
        ("protocol", pa.string()),
        ("protocol_params", pa.string()),
        ("model", pa.string()),
        ("defense", pa.string()),
        ("defense_param", pa.float64()),
        ("defense_party", pa.string()),
        ("attack", pa.string()),  # the attack's registry name (``pmc``)
        # what the evaluation ran as: unique per training (``pmc``, ``pmc@adapted``,
        # ``lrb@strong``); group by it, never by ``attack``
        ("attack_label", pa.string()),
        ("attack_preset", pa.string()),  # the preset it ran with, or null
        ("attack_adapted", pa.bool_()),  # its setting was tuned on the attacker's rows
        ("attack_type", pa.string()),
        ("attacker_party", pa.int32()),
        ("ssl_variant", pa.string()),
        ("split_scheme", pa.string()),
        ("split_param", pa.float64()),
        ("split_importance", pa.float64()),
        ("split_correlation", pa.float64()),
        ("aligned_ratio", pa.float64()),
        ("n_labeled", pa.int64()),
        ("seed", pa.int64()),
        ("mp", pa.float64()),
        ("ap", pa.float64()),
        ("ap_chance", pa.float64()),
        ("ap_advantage", pa.float64()),
        ("ap_advantage_se", pa.float64()),
        ("ap_collapse", pa.float64()),
        ("mp_se", pa.float64()),
        ("rounds", pa.int64()),
        ("comm_bytes", pa.int64()),
        ("train_seconds", pa.float64()),
        ("attack_seconds", pa.float64()),
        ("epsilon", pa.float64()),
        ("rounds_to_target", pa.int64()),
        ("val_ratio", pa.float64()),
        ("val_mp", pa.float64()),
        ("val_mp_se", pa.float64()),
        ("extra", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("engine_version", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("spec_json", pa.string()),
        ("spec", SPEC_TYPE),  # spec_json's fields, typed (SPEC_TYPE)
    ],
    metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()},
)
# columns a Record holds; ``spec`` is derived from ``spec_json`` when a table is built
RECORD_FIELDS = [f for f in RECORD_SCHEMA if f.name != "spec"]


@dataclass(frozen=True)
class Record:
    """One row: a trial's clean main task (``attack='none'``) or one attack on it."""

    config_hash: str
    dataset: str
    n_parties: int
    partition: str
    protocol: str
    protocol_params: str
    model: str
    ssl_variant: str
    aligned_ratio: float
    n_labeled: int | None
    seed: int
    mp: float | None
    rounds: int
    comm_bytes: int
    train_seconds: float
    spec_json: str
    sweep: str = ""
    trial_id: str = ""
    setting_hash: str = ""  # config_hash of the spec without its defenses: pairs MP* rows
    defense: str = "none"
    defense_param: float | None = None
    defense_party: str = ""
    attack: str = "none"
    attack_label: str = ""  # "" is ``attack`` itself (``label``); what a reader groups by
    attack_preset: str | None = None
    attack_adapted: bool = False
    attack_type: str = "none"
    attacker_party: int | None = None
    ap: float | None = None
    # the AP's no-information baseline on the same rows and the advantage over it, in
    # [0, 1], with its test-set SE; collapse in [0, 1]: 1 = one constant guess
    # (trainables/attacks/chance.py). mp_se: the MP's sampling error (accuracy MPs)
    ap_chance: float | None = None
    ap_advantage: float | None = None
    ap_advantage_se: float | None = None
    ap_collapse: float | None = None
    mp_se: float | None = None
    attack_seconds: float = 0.0
    epsilon: float | None = None  # DP privacy spent at delta=1e-5, where a defense accounts it
    rounds_to_target: int | None = None  # first round whose MP reached spec.target_mp
    # the share of labeled rows held out for validation, and the MP on them with its SE:
    # what selection reads (searches, best.json, "best" lines); null where there are none
    val_ratio: float = 0.0
    val_mp: float | None = None
    val_mp_se: float | None = None
    extra: str = "{}"  # JSON: measurements particular to a model, protocol or defense
    # the column split: scheme, its α or β, and what a VertiBench split measured (the
    # passive parties' share of the Shapley importance; β of a correlation split)
    split_scheme: str = "auto"
    split_param: float | None = None
    split_importance: float | None = None
    split_correlation: float | None = None
    status: str = "ok"
    error: str = ""
    engine_version: str = ENGINE_VERSION
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def clean(cls, spec: TrialSpec, n_labeled: int, **measured: object) -> Record:
        """The ``attack='none'`` row of ``spec`` with the measured values (and its split's,
        from ``split_record``; the per-party importance shares go to ``extra``)."""
        split = split_record(spec)
        shares = split.pop("split_party_importance", None)
        if shares is not None:
            extra = json.loads(str(measured.get("extra", "{}")))
            measured = {
                **measured,
                "extra": json.dumps({**extra, "split_party_importance": shares}),
            }
        return cls(
            config_hash=spec.config_hash,
            setting_hash=setting_hash(spec),
            dataset=spec.dataset,
            n_parties=spec.n_parties,
            partition=spec.partition,
            protocol=spec.protocol,
            protocol_params=json.dumps(spec.protocol_params, sort_keys=True),
            model=str(spec.model),
            ssl_variant=spec.ssl_variant,
            aligned_ratio=spec.aligned_ratio,
            val_ratio=spec.val_ratio,
            n_labeled=n_labeled,
            seed=spec.seed,
            spec_json=spec.model_dump_json(),
            **split,
            **{"defense": defense_label(spec), "defense_param": spec.defense_param, **measured},  # type: ignore[arg-type]  # measured: the columns' own types
        )

    @classmethod
    def trained(
        cls,
        spec: TrialSpec,
        n_labeled: int,
        result: TrainResult,
        *,
        y_test: np.ndarray | None = None,
        metric: str = "accuracy",
        y_val: np.ndarray | None = None,
        **fields: object,
    ) -> Record:
        """The clean record of a training of any kind, from its ``TrainResult``: MP with
        its sampling error over ``y_test`` (n_test,) by ``metric``, rounds and bytes as its
        transport counted them, rounds to the target, seconds; the validation rows' MP with
        its error over ``y_val`` (n_val,) where the training has them. ``fields`` add or override
        (``extra``, ``epsilon`` and the DP fields, a kind's own ``rounds_to_target``)."""
        measured: dict[str, object] = {
            "mp": result.mp,
            "mp_se": main_task_se(result.mp, y_test, metric),
            "val_mp": result.val_mp,
            "val_mp_se": None
            if result.val_mp is None
            else main_task_se(result.val_mp, y_val, metric),
            "rounds": result.rounds,
            "comm_bytes": result.comm_bytes,
            "rounds_to_target": result.rounds_to_target,
            "train_seconds": round(result.train_seconds, 4),
            "trial_id": spec.config_hash,
        }
        return cls.clean(spec, n_labeled, **{**measured, **fields})

    def attacked(self, out: AttackOutcome) -> Record:
        """The record of attack ``out`` on this clean record's training, whatever its kind:
        the judge's AP beside its baseline (advantage, its SE, collapse), the MP under
        attack with its SE, the attack's seconds, and ``extra`` with what the attack ran
        with (``attack_label``, ``attack_preset``, ``attack_params``: ``record_extra``)."""
        return dataclasses.replace(
            self,
            attack=out.name,
            attack_label=str(out.extra.get("attack_label") or out.name),
            attack_preset=out.extra.get("attack_preset") or None,
            attack_adapted="adapted" in out.extra,
            attack_type=out.type,
            attacker_party=out.attacker,
            **out.record_fields(),
            attack_seconds=round(out.seconds, 4),
            extra=merged_extra(self.extra, out.extra),
        )

    @property
    def label(self) -> str:
        """The evaluation's label as written: ``attack_label``, or the attack's name."""
        return self.attack_label or self.attack

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "attack_label": self.label}

    def to_json(self) -> str:
        return json.dumps({**self.to_dict(), "created_at": self.created_at.isoformat()})

    @classmethod
    def from_json(cls, text: str) -> Record:
        fields = json.loads(text)
        fields["created_at"] = datetime.fromisoformat(fields["created_at"])
        return cls(**fields)


def merged_extra(base: str, added: dict[str, object]) -> str:
    """A record's ``extra`` JSON with ``added`` on top: a kind's own measurements on its
    defense counts, or what an attack ran with (``attack_label``, ``attack_preset``,
    ``attack_params``: ``Attack.record_extra``) on its training's."""
    return json.dumps({**json.loads(base or "{}"), **added}, sort_keys=True)


def setting_hash(spec: TrialSpec) -> str:
    """The spec's hash with every defense field at its default: a defended trial and its
    undefended twin (same data, model, protocol, attack, seed) share it; DCS pairs on it."""
    bare = spec.model_copy(
        update={"defense": "none", "defense_param": None, "defense_params": {}, "stack": ()}
    )
    return bare.config_hash


def defense_label(spec: TrialSpec) -> str:
    """``none``, a defense name, or stacked names joined by ``+`` (``mid+gs``)."""
    names = [spec.defense] if spec.defense != "none" else []
    names += [entry.name for entry in spec.stack]
    return "+".join(names) or "none"


def records_to_table(records: list[Record]) -> pa.Table:
    """Records as one Arrow table with exactly RECORD_SCHEMA."""
    rows = [r.to_dict() for r in records]
    table = pa.Table.from_pylist(rows, schema=pa.schema(RECORD_FIELDS))
    spec = spec_array([r.spec_json for r in records])
    return table.append_column(RECORD_SCHEMA.field("spec"), spec).replace_schema_metadata(
        RECORD_SCHEMA.metadata
    )
