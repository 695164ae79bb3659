"""The frozen description of one VFL trial.

Why a pydantic model: a YAML space, the CLI and the sweep planner all build specs from
untrusted input, and every bad value must be reported with its key and what is allowed
before anything runs. ``frozen=True`` makes a spec an immutable record (Optuna's
``FrozenTrial`` idea); ``config_hash`` identifies it across runs and machines.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainables.errors import ConfigError

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


def _refuse_bool(allowed: str) -> BeforeValidator:
    """Reject YAML booleans where a number is expected (pydantic would read true as 1).

    Why a before-validator rather than strict mode: strict mode would also refuse the int
    a CLI or an Optuna trial passes for a float, and the quoted "3" a user may write.
    """

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticCustomError(
                "bool_not_number",
                f"a boolean is not {allowed} (YAML reads true/false/yes/no/on/off as "
                "booleans); allowed: {allowed}",
                {"allowed": allowed},
            )
        return value

    return BeforeValidator(check)


def _scalar(value: Any) -> Any:
    """A params value: a number or a string, one message for anything else (no union list)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PydanticCustomError(
            "params_scalar",
            "a parameter value must be a number or a string (not a boolean, list or "
            "mapping); allowed: a number or a string",
        )
    return value


Int = Annotated[int, _refuse_bool("an integer")]
Float = Annotated[float, _refuse_bool("a number")]
Scalar = Annotated[int | float | str, BeforeValidator(_scalar)]
Params = dict[str, Scalar]  # protocol/model/defense/attack parameters
Bool = StrictBool  # true/false only: 1 or "yes" where a flag is expected is a mistake


class DefenseEntry(BaseModel):
    """One more defense stacked after the spec's primary one (``TrialSpec.stack``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    strength: Float | None = None  # None -> the defense's default strength
    params: Params = Field(default_factory=dict)


class TrialSpec(BaseModel):
    """Everything that determines a trial's records (with the seed); nothing about where it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str = "breast_cancer"
    dataset_params: Params = Field(default_factory=dict)
    n_parties: Int = Field(2, ge=2)
    split_scheme: str = "auto"
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
    ssl_variant: str = "none"
    defense: str = "none"  # a name in trainables.defenses.DEFENSES
    defense_param: Float | None = None  # its one strength; None -> the defense's default
    defense_params: Params = Field(default_factory=dict)  # e.g. party
    stack: tuple[DefenseEntry, ...] = ()  # more defenses, applied after ``defense``
    key_length: Literal[512, 1024, 2048] = 1024  # Paillier key bits (encrypted models only)
    target_mp: Float | None = Field(None, gt=0, le=1)  # record rounds until MP reaches this
    train_attack: str = "none"  # a training-time attack (it changes the training itself)
    train_attack_params: Params = Field(default_factory=dict)
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
        return values

    @classmethod
    def build(cls, **fields: Any) -> TrialSpec:
        """Validate ``fields``; a ConfigError naming every bad key, value and rule otherwise."""
        try:
            return cls(**fields)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err, source="trial spec")) from None

    @property
    def config_hash(self) -> str:
        """Stable 16-hex-digit id of this spec: same fields, same hash, on any machine."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

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
            line = f"{path}: unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
        elif problem["type"] == "missing":
            line = f"{path}: missing; this key is required"
        elif not loc or (problem["type"] == "value_error" and isinstance(problem["input"], dict)):
            line = f"{path}: {msg}" if path else msg  # a rule over a whole mapping
        else:
            line = f"{path}={show(problem.get('input'))}: {msg}"
        by_path.setdefault(path, [])
        if line not in by_path[path]:
            by_path[path].append(line)
    return "\n".join(f"{source}: " + "; or ".join(lines) for lines in by_path.values())


def key_path(loc: tuple[Any, ...]) -> str:
    """``("grid", "seed", 1)`` -> ``grid.seed[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def show(value: Any) -> str:
    """A bad value as quoted in a message: its repr, cut to ``MAX_SHOWN`` characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _is_tag(part: Any) -> bool:
    """A union member's tag in an error location (``<entry>``): not part of the key path."""
    return isinstance(part, str) and part.startswith("<") and part.endswith(">")


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the (nested) model that ``loc`` points into."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            current = _model_in(current)
            if current is None:
                return []
            if part not in current.model_fields:  # a dict key (e.g. search.params.lr)
                continue
        info = current.model_fields.get(str(part))
        if info is None:
            return []
        current = info.annotation
    current = current if isinstance(current, type) else _model_in(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(k for k in current.model_fields if k != "source")
    return []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside ``X | None``, ``list[X]`` or ``dict[str, X]``."""
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        inner = _model_in(arg)
        if inner is not None:
            return inner
    return None
