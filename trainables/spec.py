"""The frozen description of one VFL trial.

Why a pydantic model: a YAML space, the CLI and the sweep planner all build specs from
untrusted input, and every bad value must be reported with its key and what is allowed
before anything runs. ``frozen=True`` makes a spec an immutable record (Optuna's
``FrozenTrial`` idea); ``config_hash`` identifies it across runs and machines.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from trainables.errors import ConfigError, did_you_mean

# VFLAIR's main-task settings (ALGORITHMS.md); used wherever a spec leaves a field unset.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "breast_cancer": {"model": "mlp2", "lr": 0.05, "epochs": 50, "batch_size": 1024},
    "digits": {"model": "mlp2", "lr": 0.01, "epochs": 30, "batch_size": 256},
    "synthetic": {"model": "mlp2", "lr": 0.01, "epochs": 20, "batch_size": 1024},
    "mnist": {"model": "mlp2", "lr": 0.01, "epochs": 30, "batch_size": 2048},
    "diabetes": {"model": "lr", "lr": 0.05, "epochs": 80, "batch_size": 1024},
    "adult": {"model": "mlp4", "lr": 0.01, "epochs": 50, "batch_size": 1024},
    "credit": {"model": "mlp4", "lr": 0.01, "epochs": 40, "batch_size": 1024},
    "nursery": {"model": "mlp3", "lr": 0.01, "epochs": 50, "batch_size": 1024},
}
FALLBACK_DEFAULTS: dict[str, Any] = {"model": "mlp2", "lr": 0.01, "epochs": 30, "batch_size": 1024}
MAX_SHOWN = 80  # characters of a bad value quoted in an error message


class Quoted(str):
    """A scalar the file quoted that would read as a number or a boolean without quotes
    (``epochs: "5"``); ``kind`` is what it would read as (int, float or bool) and
    ``written`` is how the file wrote it.

    Why a marked string: YAML reads a quoted scalar as text, and pydantic's lax mode would
    turn "5" into 5 without a word. ``sweep_engine/yaml_read.py`` builds these from the
    node's quote style; the validators here refuse them where a number or flag is expected
    (``Int``, ``Float``, ``Bool``, ``Params`` values) and name the key. A str field takes
    one as plain text (pydantic stores an exact str).
    """

    kind: str
    written: str

    def __new__(cls, text: str, kind: str = "int", quote: str = '"') -> Quoted:
        obj = super().__new__(cls, text)
        obj.kind, obj.written = kind, f"{quote}{text}{quote}"
        return obj


def quoted_error(value: Quoted, allowed: str, fits: tuple[str, ...]) -> PydanticCustomError:
    """The error for a quoted scalar where ``allowed`` is expected; the "write it without
    quotes" hint only where the unquoted scalar (of ``value.kind``) would fit."""
    hint = f" (write {value} without quotes)" if value.kind in fits else ""
    return PydanticCustomError(
        "quoted_scalar",
        "{written} is a string; allowed: {allowed}{hint}",
        {"written": value.written, "allowed": allowed, "hint": hint},
    )


def _refuse_text(allowed: str, fits: tuple[str, ...]) -> BeforeValidator:
    """Reject YAML booleans and quoted scalars where a number is expected.

    Why a before-validator rather than strict mode: strict mode would also refuse the int
    a CLI or an Optuna trial passes for a float. Lax mode would read true as 1 and "5"
    as 5; only what the YAML file wrote tells a quoted "5" from a number.
    """

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticCustomError(
                "bool_not_number",
                f"a boolean is not {allowed} (YAML reads true/false/yes/no/on/off as "
                "booleans); allowed: {allowed}",
                {"allowed": allowed},
            )
        if isinstance(value, Quoted):
            raise quoted_error(value, allowed, fits)
        return value

    return BeforeValidator(check)


def _flag(value: Any) -> Any:
    """A quoted "true" where a flag is expected is named as a string (StrictBool refuses
    every other non-boolean itself)."""
    if isinstance(value, Quoted):
        raise quoted_error(value, "true or false", ("bool",))
    return value


def _scalar(value: Any) -> Any:
    """A params value: a number or a string, one message for anything else (no union list).

    A quoted number is refused (the parameters that take text take words); a quoted
    ``"yes"`` is the text yes."""
    if isinstance(value, Quoted):
        if value.kind != "bool":
            raise quoted_error(value, "a number", ("int", "float"))
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PydanticCustomError(
            "params_scalar",
            "a parameter value must be a number or a string (not a boolean, list or "
            "mapping); allowed: a number or a string",
        )
    return value


Int = Annotated[int, _refuse_text("an integer", ("int",))]
Float = Annotated[float, _refuse_text("a number", ("int", "float"))]
Scalar = Annotated[int | float | str, BeforeValidator(_scalar)]
Params = dict[str, Scalar]  # protocol/model/defense/attack parameters
Bool = Annotated[StrictBool, BeforeValidator(_flag)]  # true/false only: 1 or "yes" is a mistake
KeyLength = Annotated[Literal[512, 1024, 2048], _refuse_text("512, 1024 or 2048", ("int",))]


class DefenseEntry(BaseModel):
    """One more defense stacked after the spec's primary one (``TrialSpec.stack``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    strength: Float | None = None  # None -> the defense's default strength
    params: Params = Field(default_factory=dict)


# Fields added after records existed: at their default they are left out of config_hash,
# so a sweep started before them resumes and golden records keep their ids.
NEW_AT_DEFAULT_UNHASHED = (
    "split_params", "val_ratio", "lr_decay", "shuffle", "procedure", "weight_init",
    "train_attack_adapt",
)  # fmt: skip

# ``procedure: vflair``: the options it sets where the spec does not set them itself, each
# one a named option of its own that the record's ``spec_json`` shows (docs/vflair.md)
VFLAIR_PROCEDURE: dict[str, Any] = {
    "lr_decay": "vflair", "shuffle": False, "weight_init": "vflair", "split_scheme": "vflair",
}  # fmt: skip
VFLAIR_ATTACK_PARAMS: dict[str, dict[str, Any]] = {
    # the per-batch injection, its AP count, AP and MP as means over epochs
    "lrb": {"injection": "colluding", "count": "all", "over": "epochs"},
    # the first batch's gradients (DLI: each row's first negative element)
    "dli": {"rounds": "first"},
    "ns": {"rounds": "first", "score": "vflair"},  # its acc, max(acc, 1 - acc)
    # VFLAIR's grant (one row of that batch) and its acc
    "ds": {"rounds": "first", "positive": "first_batch", "score": "vflair"},
    "mf": {"mp": "tampered"},  # AP against the MP with the attacked rows in it
    "nsb": {"mp": "tampered", "over": "epochs"},
}
VFLAIR_DEFENSE_PARAMS: dict[str, dict[str, Any]] = {
    "dcor": {"distances": "vflair"},
    "gper": {"form": "vflair"},
    "gs": {"carry": "position"},  # the previous message's remainder, by position
    "mid": {"form": "vflair"},  # its MID_model (trainables/defenses/mid.py)
}
# per dataset, where VFLAIR's configs set them (its MID's own learning rate: the
# ``passive_party_attack`` configs, ``defense.parameters.lr``)
VFLAIR_DATASET_DEFENSE_PARAMS: dict[tuple[str, str], dict[str, Any]] = {
    ("mid", "mnist"): {"lr": 1e-4},
    ("mid", "cifar10"): {"lr": 1e-3},
    ("mid", "nuswide"): {"lr": 1e-3},
    ("mid", "breast_cancer"): {"lr": 0.05},
}


def procedure_params(spec: TrialSpec, attack: str, params: dict[str, Any]) -> dict[str, Any]:
    """An evaluated attack's parameters under ``spec.procedure``: the procedure's where
    ``params`` leave them unset (``vflair``: ``VFLAIR_ATTACK_PARAMS``)."""
    if spec.procedure != "vflair":
        return dict(params)
    return {**VFLAIR_ATTACK_PARAMS.get(attack, {}), **params}


def _vflair_procedure(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with what ``procedure: vflair`` switches, where they leave it unset."""
    for key, value in VFLAIR_PROCEDURE.items():
        values.setdefault(key, value)
    attack = values.get("train_attack")
    if isinstance(attack, str) and attack in VFLAIR_ATTACK_PARAMS:
        given = values.get("train_attack_params") or {}
        if isinstance(given, dict):
            values["train_attack_params"] = {**VFLAIR_ATTACK_PARAMS[attack], **given}
    defense = values.get("defense")
    if isinstance(defense, str) and defense in VFLAIR_DEFENSE_PARAMS:
        given = values.get("defense_params") or {}
        own = VFLAIR_DATASET_DEFENSE_PARAMS.get((defense, str(values.get("dataset"))), {})
        if isinstance(given, dict):
            values["defense_params"] = {**VFLAIR_DEFENSE_PARAMS[defense], **own, **given}
    return values


class TrialSpec(BaseModel):
    """Everything that determines a trial's records (with the seed); nothing about where it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str = "breast_cancer"
    dataset_params: Params = Field(default_factory=dict)
    n_parties: Int = Field(2, ge=2)
    split_scheme: str = "auto"  # trainables/data/split.py SCHEMES
    split_params: Params = Field(default_factory=dict)  # importance: alpha; correlation: beta
    partition: Literal["agg", "split"] = "agg"
    model: str | None = None  # None -> the dataset's VFLAIR default
    model_params: Params = Field(default_factory=dict)  # e.g. tree depth
    hidden: tuple[Int, ...] | None = None  # None -> the model's default widths for the dataset
    protocol: str = "fedsgd"
    protocol_params: Params = Field(default_factory=dict)
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: Float | None = Field(None, gt=0)
    epochs: Int | None = Field(None, ge=1)
    batch_size: Int | None = Field(None, ge=1)
    aligned_ratio: Float = Field(1.0, gt=0, le=1)
    n_labeled: Int | None = Field(None, ge=1)
    n_aligned: Int | None = Field(None, ge=1)  # overlapping rows by count (overrides the ratio)
    # a share of the labeled aligned rows held out as validation rows (stratified, seeded by
    # ``seed``): what searches, schedulers and "best" lines select on (``val_mp``); 0: none
    val_ratio: Float = Field(0.0, ge=0, lt=1)
    # VFLAIR's training procedure, each a named option (docs/vflair.md); NN trainings only:
    # ``lr_decay: inv_sqrt``: epoch e trains at lr / sqrt(e + 1); ``vflair``: VFLAIR's
    # trainer, which decays after each epoch: lr in epochs 0 and 1, then lr / sqrt(e);
    # ``shuffle: false``: every epoch's batches in row order (VFLAIR does not shuffle)
    # ``weight_init: vflair``: the bottoms start as VFLAIR's model classes start them (its
    # MLP2: Xavier-uniform first layer, zero bias; ``models.vflair_init``)
    lr_decay: Literal["none", "inv_sqrt", "vflair"] = "none"
    shuffle: bool = True
    weight_init: Literal["torch", "vflair"] = "torch"
    # ``vflair``: VFLAIR's procedure, as the options above and the attack and defense
    # parameters in ``VFLAIR_PROCEDURE`` / ``VFLAIR_*_PARAMS``, where the spec leaves them
    # unset (each then shows in the record); ``standard``: the papers' (ours)
    procedure: Literal["standard", "vflair"] = "standard"
    ssl_variant: str = "none"
    defense: str = "none"  # a name in trainables.defenses.DEFENSES
    defense_param: Float | None = None  # its one strength; None -> the defense's default
    defense_params: Params = Field(default_factory=dict)  # e.g. party
    stack: tuple[DefenseEntry, ...] = ()  # more defenses, applied after ``defense``
    key_length: KeyLength = 1024  # Paillier key bits (encrypted models only)
    target_mp: Float | None = Field(None, gt=0, le=1)  # record rounds until MP reaches this
    train_attack: str = "none"  # a training-time attack (it changes the training itself)
    train_attack_params: Params = Field(default_factory=dict)
    # its attacker's tuning budget (``attacks/tuning_trained.py``: ``trials`` trainings at
    # random settings, chosen on its own rows); empty: the attack at fixed settings
    train_attack_adapt: Params = Field(default_factory=dict)
    seed: Int = Field(0, ge=0)
    device: Literal["cpu", "cuda", "auto"] = "cpu"

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        values = dict(values)
        base = DATASET_DEFAULTS.get(str(values.get("dataset", "breast_cancer")), FALLBACK_DEFAULTS)
        for key, default in base.items():
            if values.get(key) is None:
                values[key] = default
        if values.get("procedure") == "vflair":
            values = _vflair_procedure(values)
        return values

    @classmethod
    def build(cls, **fields: Any) -> TrialSpec:
        """Validate ``fields``; a ConfigError naming every bad key, value and rule otherwise."""
        try:
            return cls(**fields)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err, source="trial spec")) from None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy without the cached ``config_hash`` (it copies ``__dict__``,
        where the cache lives, even when ``update`` changes fields)."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("config_hash", None)
        return copy

    def updated(self, **fields: Any) -> TrialSpec:
        """This spec with ``fields`` changed, validated as a new one: the one way a spec
        changes, so its ``procedure`` fills in what the new fields leave unset (a
        ``model_copy`` would skip the validators)."""
        return TrialSpec.build(**{**self.model_dump(), **fields})

    @functools.cached_property
    def config_hash(self) -> str:
        """Stable 16-hex-digit id of this spec: same fields, same hash, on any machine.

        Computed once per spec (a frozen model): the driver asks ~30 times a training
        (ids, packs, the estimate, progress lines), 70 us each, a second per 500 trainings.
        ``model_copy`` drops it (below), so a copy with changed fields hashes anew."""
        fields = self.model_dump(mode="json")
        for name in NEW_AT_DEFAULT_UNHASHED:  # old specs keep their hashes (and records)
            if fields[name] == TrialSpec.model_fields[name].get_default(call_default_factory=True):
                del fields[name]
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def required(self, name: Literal["lr", "epochs", "batch_size", "n_labeled"]) -> int | float:
        """A field the dataset's defaults may leave unset (``lr``, ``epochs``,
        ``batch_size``, ``n_labeled``) where a kind needs it: its value, or a ConfigError
        naming it. Typed code reads ``int(spec.required("epochs"))``, not a cast."""
        value = getattr(self, name)
        if value is None:
            raise ConfigError(f"trial spec: {name} is unset for dataset {self.dataset!r}; "
                              "this kind needs it: set it in the space's base")  # fmt: skip
        return value

    def __hash__(self) -> int:  # dict fields are not hashable; the content hash is
        return hash(self.config_hash)


def format_validation_error(
    err: ValidationError, source: str, model: type[BaseModel] | None = None, prefix: str = ""
) -> str:
    """One line per bad key: ``<source>: <key path>=<bad value>: <what is allowed>``.

    ``prefix`` is where the validated mapping sits (``base``). For an unknown key the
    allowed keys at that level are listed (from ``model``); errors of a whole mapping
    (a model validator) name the mapping, not its value; several alternatives of a union
    failing at one path become one line; long values are cut to ``MAX_SHOWN`` characters.
    """
    by_path: dict[str, list[str]] = {}
    for problem in err.errors():
        loc = tuple(p for p in problem["loc"] if not _is_tag(p))
        path = key_path(((prefix,) if prefix else ()) + loc)
        msg = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            allowed = _fields_at(model, loc[:-1]) if model is not None else []
            hint = did_you_mean(loc[-1] if loc else None, allowed)
            line = f"{path}: unknown key" + (
                f"; {hint}allowed: {', '.join(allowed)}" if allowed else ""
            )
        elif problem["type"] == "quoted_scalar":
            ctx = problem.get("ctx", {})
            bounds = _bounds(model, loc) if model is not None else ""
            line = (
                f"{path}={show(problem.get('input'))}: {ctx['written']} is a string; "
                f"allowed: {ctx['allowed']}{bounds}{ctx['hint']}"
            )
        elif problem["type"] == "missing":
            line = f"{path}: missing; this key is required"
        elif not loc or (problem["type"] == "value_error" and isinstance(problem["input"], dict)):
            line = f"{path}: {msg}" if path else msg  # a rule over a whole mapping
        else:
            line = f"{path}={show(problem.get('input'))}: {msg}"
            if problem["type"] == "literal_error":  # a misspelled choice: partition, optimizer
                expected = re.findall(r"'([^']*)'", problem.get("ctx", {}).get("expected", ""))
                hint = did_you_mean(problem.get("input"), expected)
                line += f"; {hint.strip()}" if hint else ""
        by_path.setdefault(path, [])
        if line not in by_path[path]:
            by_path[path].append(line)
    return "\n".join(f"{source}: " + "; or ".join(lines) for lines in by_path.values())


def key_path(loc: tuple[int | str, ...]) -> str:
    """``("grid", "seed", 1)`` -> ``grid.seed[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def show(value: object) -> str:
    """A bad value as quoted in a message: its repr, cut to ``MAX_SHOWN`` characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _is_tag(part: object) -> bool:
    """A union member's tag in an error location (``<entry>``): not part of the key path."""
    return isinstance(part, str) and part.startswith("<") and part.endswith(">")


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[Any, FieldInfo | None]:
    """The annotation that ``loc`` points at in ``model``, and the field ``loc`` ends on
    (None where it ends on a list index or a dict key, or leaves the schema)."""
    current: Any = model
    info: FieldInfo | None = None
    for part in loc:
        info = None
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            current = _model_in(current)
            if current is None:
                return None, None
            if part not in current.model_fields:  # a dict key (e.g. search.params.lr)
                continue
        info = current.model_fields.get(str(part))
        if info is None:
            return None, None
        current = info.annotation
    return current, info


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the (nested) model that ``loc`` points into."""
    current, _ = _walk(model, loc)
    current = current if isinstance(current, type) else _model_in(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(k for k in current.model_fields if k != "source")
    return []


def _bounds(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """`` >= 1`` or `` > 0 and <= 1``: the range of the field at ``loc``, for a message."""
    _, info = _walk(model, loc)
    signs = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    out = [
        f"{sign} {getattr(rule, name)}"
        for rule in (info.metadata if info is not None else ())
        for name, sign in signs.items()
        if hasattr(rule, name)
    ]
    return (" " + " and ".join(out)) if out else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside ``X | None``, ``list[X]`` or ``dict[str, X]``."""
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        inner = _model_in(arg)
        if inner is not None:
            return inner
    return None
