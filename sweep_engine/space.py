"""The YAML space: schema, loading and validation with errors a user can act on.

Every problem is reported as ``<file>: <key path>=<bad value>: <what is allowed>`` before
anything runs; ``SpaceError`` (a ConfigError) makes the CLI exit with code 2.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from sweep_engine.space_run import (  # noqa: F401  (re-exported: the space's schema)
    MAX_CELLS,
    HalvingBlock,
    Resources,
    RunSettings,
    SchedulerBlock,
    _Strict,
)
from sweep_engine.yaml_read import load_yaml
from trainables.errors import ConfigError, did_you_mean
from trainables.results.manifest import NESTED_FIELDS  # grid axes may be dotted into these
from trainables.spec import (
    Bool,
    Float,
    Int,
    Params,
    TrialSpec,
    format_validation_error,
)

SPACES_DIR = Path(__file__).resolve().parents[1] / "search_spaces"
METRICS = ("mp", "val_mp", "rounds", "comm_bytes", "train_seconds")
# a search that maximizes MP holds out this share of the labeled rows unless the space sets
# val_ratio itself: it selects on the validation rows (``val_mp``) and reports the test MP
SEARCH_VAL_RATIO = 0.2
MAX_NAME = 100  # characters of a space's name (a file name, with room for suffixes)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a folder name, never hidden (. or _)
# What lives in a results folder beside the sweeps (MLflow's store, its journal and the
# copies a repair sets aside, artifacts, the UI's log): a sweep so named breaks every sync.
RESERVED_NAMES = ("mlflow.db", "mlflow.db*", "mlruns", "mlartifacts", "mlflow-ui.log")


class SpaceError(ConfigError):
    """A space file that cannot be run; the message names file, key path, value, allowed."""


class SearchParam(_Strict):
    """A searched axis: a range (``low``/``high``, optionally ``log``/``step``) or ``choices``."""

    low: Float | None = None
    high: Float | None = None
    log: Bool = False
    step: Float | None = Field(default=None, gt=0)
    integer: Bool = False
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> SearchParam:
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either choices or low/high, not both; allowed: one kind")
            if not self.choices:
                raise ValueError("choices must not be empty; allowed: at least one choice")
            return self
        if self.low is None or self.high is None:
            raise ValueError(
                "a range needs both low and high; allowed: {low: .., high: ..} or {choices: [..]}"
            )
        if self.low >= self.high:
            raise ValueError(f"low={self.low} must be below high={self.high}; allowed: low < high")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0, got low={self.low}")
        return self


class Objective(_Strict):
    metric: str
    mode: Literal["max", "min"]

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        if metric not in METRICS and not metric.startswith("ap:"):
            allowed = ", ".join(METRICS) + ", ap:<attack in the space's attacks>"
            raise ValueError(f"not a record metric; allowed: {allowed}")
        return metric


class SearchBlock(_Strict):
    params: dict[str, SearchParam] = Field(min_length=1)
    objectives: list[Objective] = Field(min_length=1)
    n_trials: Int = Field(default=8, ge=1)
    sampler: Literal["tpe", "random", "nsga2"] = "tpe"
    seed: Int = 0
    # an Optuna pruner on each trial's epoch-end validation MP (single objective only)
    pruner: Literal["none", "median", "hyperband", "successive_halving"] = "none"
    pruner_grace: Int = Field(default=1, ge=1)  # epochs before the pruner may stop a trial

    @model_validator(mode="after")
    def _pruner_single_objective(self) -> SearchBlock:
        if self.pruner != "none" and len(self.objectives) > 1:
            raise ValueError(
                f"pruner={self.pruner!r} with {len(self.objectives)} objectives: Optuna "
                "prunes single-objective studies only; allowed: pruner: none, or one "
                "objective (run.scheduler stops trainings of a multi-objective search)"
            )
        return self


class AnalysisBlock(_Strict):
    """What ``vflsweep analyze`` does by default for this space (its CLI flags override)."""

    # AXIS=A:B, e.g. protocol=fedsgd:fedbcd (analysis/compare.py): contrasts B − A;
    # AXIS=REF:B,C each level against REF; AXIS=REF:* every other level of the grid
    compare: list[str] = Field(default_factory=list)

    @field_validator("compare")
    @classmethod
    def _compare_syntax(cls, texts: list[str]) -> list[str]:
        from analysis.compare import parse_group

        for text in texts:
            try:
                parse_group(text)
            except ConfigError as err:
                raise ValueError(str(err).removeprefix("--compare ")) from None
        return texts


class AdaptEntry(_Strict):
    """An adaptive attacker's budget (``trainables/attacks/tuning.py``): ``trials``
    settings of the attack's ``search`` tried on ``holdout`` of its auxiliary rows."""

    trials: int = Field(default=16, ge=1)
    sampler: Literal["tpe", "random"] = "tpe"
    holdout: Float = Field(default=0.5, gt=0, lt=1)
    # cv: k-fold over the attacker's auxiliary rows (folds 0: as many as min_rows allows,
    # 2 to 5); holdout: one split at ``holdout``. No fold holds out fewer than min_rows.
    method: Literal["cv", "holdout"] = "cv"
    folds: int = Field(default=0, ge=0, le=20)
    min_rows: int = Field(default=10, ge=1)

    @field_validator("folds")
    @classmethod
    def _not_one_fold(cls, value: int) -> int:
        if value == 1:
            raise ValueError("one fold holds nothing out; allowed: 0 (auto) or 2 to 20")
        return value


# An ``adapt:`` entry's keys, as messages name them
ADAPT_FORM = (
    "{trials: <int >= 1>, sampler: tpe|random, method: cv|holdout, folds: <0 (auto) or 2-20>, "
    "min_rows: <int >= 1>, holdout: <between 0 and 1>}"
)


class AttackEntry(_Strict):
    """An attack evaluated on every cell: a registry name and VFLAIR-default overrides."""

    name: str
    params: Params = Field(default_factory=dict)
    datasets: list[str] | None = None  # evaluate only on these datasets (None: all)
    preset: str | None = None  # a named setting of the attack (``strong``); params override it
    adapt: AdaptEntry | None = None  # also tuned by its attacker, judged as <label>@adapted

    @field_validator("adapt", mode="before")
    @classmethod
    def _adapt_is_a_mapping(cls, value: Any) -> Any:
        """``adapt: 6`` got pydantic's "a valid dictionary or instance of AdaptEntry",
        naming a class the user never wrote and none of the keys they may give."""
        if value is None or isinstance(value, dict | AdaptEntry):
            return value
        raise ValueError(f"not a mapping; allowed: {ADAPT_FORM} ({{}} for the defaults)")

    def attack_params(self) -> dict[str, Any]:
        """The parameters the attack is created with; the preset rides along as ``preset``
        (so a planned training's id and a spec's hash change with it), the tuning budget
        as ``adapt`` (the harness takes it out: ``tuning.split_adapt``)."""
        out: dict[str, Any] = dict(self.params)
        if self.preset is not None:
            out["preset"] = self.preset
        if self.adapt is not None:
            out["adapt"] = self.adapt.model_dump()
        return out


class DefenseAxis(_Strict):
    """A defense's strengths in a space (None: VFLAIR's grid) and fixed parameters."""

    strengths: list[Float] | None = None
    params: Params = Field(default_factory=dict)


def _attack_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "<name>"
    return "<entry>" if isinstance(value, dict | AttackEntry) else None


def _defense_kind(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return "<vflair>"
    if isinstance(value, list):
        return "<strengths>"
    return "<axis>" if isinstance(value, dict | DefenseAxis) else None


# Tagged unions: a bad entry gets one error naming the allowed forms, not one per form
AttackItem = Annotated[
    Annotated[str, Tag("<name>")] | Annotated[AttackEntry, Tag("<entry>")],
    Discriminator(
        _attack_kind,
        custom_error_type="attack_entry",
        custom_error_message="allowed: an attack name, or {name: ..., params: {...}, "
        f"datasets: [...], preset: ..., adapt: {ADAPT_FORM}}}",
    ),
]
DefenseValue = Annotated[
    Annotated[list[Float], Tag("<strengths>")]
    | Annotated[Literal["vflair"] | None, Tag("<vflair>")]
    | Annotated[DefenseAxis, Tag("<axis>")],
    Discriminator(
        _defense_kind,
        custom_error_type="defense_value",
        custom_error_message="allowed: a list of strengths, vflair (VFLAIR's grid), or "
        "{strengths: [...], params: {...}}",
    ),
]


class Space(_Strict):
    """A sweep: ``base`` trial fields, ``grid`` axes over them, resources, run settings."""

    # a folder and file name: results/<name>/, its lock and its records
    name: str = Field(max_length=MAX_NAME)
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    run: RunSettings = Field(default_factory=RunSettings)
    search: SearchBlock | None = None
    _applied: dict[str, str] = PrivateAttr(default_factory=dict)  # ``defaults_applied``
    analysis: AnalysisBlock = Field(default_factory=AnalysisBlock)
    attacks: list[AttackItem] = Field(default_factory=list)
    # defense name -> strengths (a list), "vflair"/null for VFLAIR's grid, or a DefenseAxis;
    # expands into a "defense" grid axis that always includes the undefended cell
    defenses: dict[str, DefenseValue] = Field(default_factory=dict)
    source: str = ""  # the file it came from, for messages

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str) -> str:
        """``<results>/<name>/`` sits beside MLflow's files (``RESERVED_NAMES``)."""
        if not NAME_RE.fullmatch(name):
            raise ValueError(
                "not a folder name; allowed: letters, digits, '.', '_' and '-', starting "
                "with a letter or a digit (a name starting with '.' or '_' is hidden)"
            )
        if any(fnmatch.fnmatch(name.lower(), r) for r in RESERVED_NAMES):
            raise ValueError(
                "reserved: the results folder holds MLflow's files under this name; allowed: "
                "any other name (not " + ", ".join(RESERVED_NAMES) + ")"
            )
        return name

    @model_validator(mode="wrap")
    @classmethod
    def _defaults_of_the_space(cls, data: Any, handler: Any) -> Any:
        """The one place where a default depends on the space: the space as validated,
        remembering which such defaults it applied (``defaults_applied``: ``plan`` prints
        them), so that none is applied silently."""
        given = cls._selection_holds_out_rows(data)
        space = handler(given)
        if given is not data and isinstance(space, Space):
            space._applied = {
                "base.val_ratio": f"{SEARCH_VAL_RATIO} (what selects reads validation rows: a "
                "search on MP, a scheduler, a pruner or halving; set base.val_ratio to change)"
            }
        return space

    @property
    def defaults_applied(self) -> dict[str, str]:
        """Defaults this space got because of what it asks (key -> value and why)."""
        return dict(self._applied)

    @staticmethod
    def _selection_holds_out_rows(data: Any) -> Any:
        """What selects holds out validation rows: ``base.val_ratio`` defaults to
        ``SEARCH_VAL_RATIO`` in a search on MP and with a scheduler, a pruner or halving
        (a plain grid keeps the paper's 0: all labeled rows train); ``data`` itself when
        no default applies."""
        if not isinstance(data, dict):
            return data
        raw_search, raw_run = data.get("search"), data.get("run")
        search: dict[str, Any] = raw_search if isinstance(raw_search, dict) else {}
        base, grid = data.get("base") or {}, data.get("grid") or {}
        raw_params, raw_objectives = search.get("params"), search.get("objectives")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        objectives: list[Any] = raw_objectives if isinstance(raw_objectives, list) else []
        on_mp = any(isinstance(o, dict) and o.get("metric") == "mp" for o in objectives)
        run: dict[str, Any] = raw_run if isinstance(raw_run, dict) else {}
        stops = run.get("scheduler") is not None or search.get("pruner", "none") != "none"
        stops = stops or run.get("halving") is not None
        if not (on_mp or stops) or not isinstance(base, dict) or not isinstance(grid, dict):
            return data
        if "val_ratio" in {*base, *grid, *params}:
            return data
        return {**data, "base": {**base, "val_ratio": SEARCH_VAL_RATIO}}

    @model_validator(mode="after")
    def _selection_has_validation_rows(self) -> Space:
        """What selects (a search on MP, a scheduler, a pruner) reads validation rows."""
        if self.run.scheduler is not None and self.search is None:
            raise ValueError(
                "run.scheduler without a search: block: a Tune scheduler stops Tune trials, "
                "and a grid runs packs of trainings per trial; allowed: a search: block, or "
                "run.halving (successive halving inside a grid's packs)"
            )
        if self.run.scheduler is not None and self.search and self.search.pruner != "none":
            raise ValueError(
                f"run.scheduler with search.pruner={self.search.pruner!r}: both would stop "
                "trainings, and only one may decide; allowed: one of the two"
            )
        if self.run.halving is not None:
            if self.search is not None or self.run.scheduler is not None:
                raise ValueError(
                    "run.halving with a search: block or run.scheduler: halving cuts a grid's "
                    "stacked packs, a search runs one training per trial; allowed: run.halving "
                    "on a grid, run.scheduler or search.pruner on a search"
                )
            if not self.run.vectorize:
                raise ValueError(
                    "run.halving with run.vectorize=false: halving cuts the stacks a vectorized "
                    "pack trains; allowed: run.vectorize: true"
                )
            if self.base.get("val_ratio", 0) == 0:
                raise ValueError(
                    "run.halving with base.val_ratio=0: halving decides on the validation MP; "
                    f"allowed: base.val_ratio > 0 (the default with halving is {SEARCH_VAL_RATIO})"
                )
        if self.search is None or self.base.get("val_ratio", 0) != 0:
            return self
        for i, obj in enumerate(self.search.objectives):
            if obj.metric in ("mp", "val_mp"):
                raise ValueError(
                    f"search.objectives[{i}].metric={obj.metric!r} with base.val_ratio=0: a "
                    "search on MP selects on validation rows (val_mp) and reports the test MP; "
                    "allowed: base.val_ratio > 0 (the default for a search is "
                    f"{SEARCH_VAL_RATIO}), or an objective other than MP"
                )
        if self.run.scheduler is not None or self.search.pruner != "none":
            raise ValueError(
                "run.scheduler / search.pruner with base.val_ratio=0: early stopping decides on "
                "the validation MP; allowed: base.val_ratio > 0 (the default with a scheduler or "
                f"a pruner is {SEARCH_VAL_RATIO})"
            )
        return self

    @model_validator(mode="after")
    def _non_empty_axes(self) -> Space:
        for axis, values in self.grid.items():
            if not values:
                raise ValueError(f"grid.{axis}=[]: an empty axis; allowed: at least one value")
        return self

    @model_validator(mode="after")
    def _ap_objectives_have_attacks(self) -> Space:
        names = {e.name for e in self.attack_entries()}
        for i, obj in enumerate(self.search.objectives if self.search else []):
            if obj.metric.startswith("ap:") and obj.metric[3:] not in names:
                raise ValueError(
                    f"search.objectives[{i}].metric={obj.metric!r}: needs {obj.metric[3:]!r} "
                    f"in attacks; allowed: ap:<attack> for attacks {sorted(names) or 'none'}"
                )
        return self

    @model_validator(mode="after")
    def _one_defense_axis(self) -> Space:
        if self.defenses and "defense" in self.grid:
            raise ValueError(
                "grid.defense: give defenses either as the 'defenses' section or as grid.defense;"
                " allowed: one of the two"
            )
        return self

    @model_validator(mode="after")
    def _compare_axes_varied(self) -> Space:
        """Each ``analysis.compare`` names an axis this space varies, and two of its values."""
        from analysis.compare import arm_of, parse_compares, parse_group

        for i, text in enumerate(self.analysis.compare):
            axis = parse_group(text)[0]
            values = self.axis_values(axis)
            if not values:
                varied = ", ".join(self.effective_grid()) or "none"
                raise ValueError(
                    f"analysis.compare[{i}]={text!r}: {axis!r} is not varied by this "
                    f"space; allowed: an axis of its grid ({varied})"
                )
            try:
                compares = parse_compares([text], self.axis_values)
            except ConfigError as err:
                raise ValueError(f"analysis.compare[{i}]: {err}") from None
            for compare in compares:
                arms = {arm_of(v, compare) for v in values}
                for arm, value in (("a", compare.a), ("b", compare.b)):
                    if arm not in arms:
                        shown = ", ".join(str(v) for v in values)
                        raise ValueError(
                            f"analysis.compare[{i}]={text!r}: {axis}={value!r} is not a "
                            f"value of the axis; allowed: {shown}"
                        )
        return self

    def compares(self) -> list[Any]:
        """``analysis.compare`` as the comparisons it asks for (``*`` over the grid's
        values): ``analysis.compare.Compare`` each."""
        from analysis.compare import parse_compares

        return parse_compares(self.analysis.compare, self.axis_values)

    def axis_values(self, axis: str) -> list[Any]:
        """The values a grid gives ``axis`` (its own axis, or a mapping-valued axis that
        sets it); empty when the space does not vary it."""
        out: list[Any] = []
        for key, values in self.effective_grid().items():
            for value in values:
                if isinstance(value, dict) and axis in value:
                    out.append(value[axis])
                elif key == axis and not isinstance(value, dict):
                    out.append(value)
        return out if len({repr(v) for v in out}) > 1 else []

    def defense_axes(self) -> dict[str, DefenseAxis]:
        """Each listed defense as a DefenseAxis (strengths None: VFLAIR's grid)."""
        out = {}
        for name, value in self.defenses.items():
            if isinstance(value, DefenseAxis):
                out[name] = value
            else:
                out[name] = DefenseAxis(strengths=value if isinstance(value, list) else None)
        return out

    def effective_grid(self) -> dict[str, list[Any]]:
        """``grid`` plus the ``defense`` axis the ``defenses`` section expands into."""
        if not self.defenses:
            return dict(self.grid)
        from trainables.defenses import DEFENSES

        values: list[Any] = [{"defense": "none"}]
        for name, axis in self.defense_axes().items():
            if name == "none":
                continue
            strengths: Sequence[float | None] | None = axis.strengths
            if strengths is None:
                strengths = list(DEFENSES.get(name).info.grid) if name in DEFENSES else [None]
            for strength in strengths:
                value: dict[str, Any] = {"defense": name, "defense_param": strength}
                if axis.params:
                    value["defense_params"] = dict(axis.params)
                values.append(value)
        return {**self.grid, "defense": values}

    def attack_entries(self) -> list[AttackEntry]:
        return [AttackEntry(name=a) if isinstance(a, str) else a for a in self.attacks]


def resolve_space_path(arg: str) -> Path:
    """``--space X`` names a file, or a shipped space in ``search_spaces/`` (``.yaml`` optional)."""
    candidates = [Path(arg), SPACES_DIR / arg, SPACES_DIR / f"{arg}.yaml"]
    for path in candidates:
        if path.is_file():
            return path
    shipped = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
    raise SpaceError(
        f"{arg}: no such space file (looked in . and {SPACES_DIR}); shipped: {shipped}"
    )


def load_space(arg: str) -> Space:
    """Read, parse and schema-check a space file; field values are checked by ``check_space``."""
    path = resolve_space_path(arg)
    try:
        raw = load_yaml(path)
    except SpaceError:
        raise
    except ConfigError as err:
        raise SpaceError(str(err)) from None
    if raw is None:
        raise SpaceError(f"{path}: the file is empty; allowed: a mapping with at least 'name'")
    if not isinstance(raw, dict):
        raise SpaceError(
            f"{path}: the top level is a {type(raw).__name__}; it must be a mapping with at "
            "least 'name'"
        )
    if "source" in raw:  # set by the loader, not by the file
        raise SpaceError(f"{path}: source: unknown key; allowed: " + ", ".join(_top_keys()))
    try:
        return Space(**raw, source=str(path))
    except ValidationError as err:
        raise SpaceError(format_validation_error(err, str(path), Space)) from None


def _top_keys() -> list[str]:
    return sorted(k for k in Space.model_fields if k != "source")


def allowed_axes() -> list[str]:
    return sorted(TrialSpec.model_fields) + [f"{f}.<name>" for f in NESTED_FIELDS]


def apply_value(fields: dict[str, Any], axis: str, value: Any) -> dict[str, Any]:
    """``fields`` with ``axis`` set to ``value``; a mapping value sets several fields at once."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in fields.items()}
    if "." in axis:
        head, key = axis.split(".", 1)
        out[head] = {**out.get(head, {}), key: value}
    elif isinstance(value, dict) and axis not in NESTED_FIELDS:
        for key, inner in value.items():
            out = apply_value(out, key, inner)
    else:
        out[axis] = value
    return out


def check_axis_name(space: Space, axis: str, where: str) -> None:
    head = axis.split(".", 1)[0]
    ok = head in TrialSpec.model_fields and ("." not in axis or head in NESTED_FIELDS)
    if not ok:
        fields = TrialSpec.model_fields
        hint = did_you_mean(axis, allowed_axes()) or (
            did_you_mean(head, NESTED_FIELDS if head in fields else fields)
        )
        raise SpaceError(
            f"{space.source}: {where}: unknown trial field {axis!r}; {hint}allowed: "
            + ", ".join(allowed_axes())
        )
