"""Plan-time checks that name the key path of every bad value (``plan.py`` calls them).

Why here and not at run time: a value that fails inside a Ray trial is retried, recorded
as an error and exits 1 after minutes; the same value refused while planning exits 2 in
a second with the key to fix, and nothing is written.
"""

from __future__ import annotations

import math
import os
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sweep_engine.space import AttackEntry, Space, SpaceError, apply_value
from trainables.errors import ConfigError, did_you_mean
from trainables.kinds import ssl_variant_names
from trainables.spec import TrialSpec, format_validation_error, show
from trainables.trial import check_names, takes_model_params


def spec_at(space: Space, fields: dict[str, Any], where: str) -> TrialSpec:
    """``fields`` as a checked spec; a SpaceError naming ``where`` and the field otherwise.

    ``where`` is ``base`` (fields are then named ``base.<field>``) or the grid, defenses or
    search entry the fields came from (``grid.lr[1]: lr=-0.5: ...``).
    """
    source = space.source if where == "base" else f"{space.source}: {where}"
    try:
        spec = TrialSpec(**fields)
    except ValidationError as err:
        prefix = "base" if where == "base" else ""
        raise SpaceError(format_validation_error(err, source, TrialSpec, prefix)) from None
    try:
        for field, value, check in _named_checks(spec, _varied(space)):
            try:
                check()
            except ConfigError as err:
                path = f"base.{field}" if where == "base" else field
                raise SpaceError(f"{source}: {path}={show(value)}: {err}") from None
        check_names(spec)  # whatever the named checks above do not cover
    except SpaceError:
        raise
    except ConfigError as err:  # MissingDataError included: it names the path
        raise SpaceError(f"{space.source}: {where}: {err}") from None
    return spec


def _varied(space: Space) -> set[str]:
    """Trial fields some grid axis or searched parameter sets (base alone is not a cell)."""
    out = {axis.split(".", 1)[0] for axis in space.effective_grid()}
    for values in space.grid.values():
        out |= {k for v in values if isinstance(v, dict) for k in v}
    return out | {p.split(".", 1)[0] for p in (space.search.params if space.search else {})}


def model_params_reason(spec: TrialSpec) -> str | None:
    """Why a cell's ``model_params`` cannot apply (an NN model takes none), or None."""
    if spec.model_params and not takes_model_params(spec):
        try:
            _no_model_params(spec)
        except ConfigError as err:
            return f"model_params={show(dict(spec.model_params))}: {err}"
    return None


def _named_checks(spec: TrialSpec, varied: set[str]) -> list[tuple[str, Any, Any]]:
    """(field, value, check) for the registry names of ``spec``, so errors name the field.

    ``model_params`` of an NN model are refused here only when no axis varies the model or
    the ssl variant; otherwise the cells that cannot use them are dropped (``expand``).
    """
    from trainables.data import DATASETS
    from trainables.defenses import DEFENSES
    from trainables.defenses.spec_defenses import entries
    from trainables.protocols import PROTOCOLS

    out: list[tuple[str, Any, Any]] = [
        ("dataset", spec.dataset, lambda: DATASETS.get(spec.dataset))
    ]
    out.append(("split_scheme", spec.split_scheme, lambda: _split_scheme(spec.split_scheme)))
    out += _split_params_checks(spec, varied)
    if spec.ssl_variant not in ssl_variant_names():
        out.append(("ssl_variant", spec.ssl_variant, lambda: _unknown_ssl(spec.ssl_variant)))
    if spec.train_attack != "none":
        out.append(("train_attack", spec.train_attack, lambda: _train_attack(spec)))
    own_models = takes_model_params(spec)  # trees, SSL kinds: their checks name the options
    if not own_models:
        out.append(("model", spec.model, lambda: known_model(str(spec.model))))
    out += [
        ("protocol", spec.protocol, lambda: PROTOCOLS.get(spec.protocol)),
        (
            "protocol_params",
            dict(spec.protocol_params),
            lambda: PROTOCOLS.create(spec.protocol, **spec.protocol_params),
        ),
    ]
    refuse = not own_models and not {"model", "ssl_variant"} & varied
    for key, value in spec.model_params.items() if refuse else ():
        out.append((f"model_params.{key}", value, lambda: _no_model_params(spec)))
    for i, entry in enumerate(entries(spec)):
        primary = i == 0 and spec.defense != "none"
        j = i - (1 if spec.defense != "none" else 0)
        if entry.name not in DEFENSES:
            path = "defense" if primary else f"stack[{j}].name"
            out.append((path, entry.name, lambda n=entry.name: DEFENSES.get(n)))
            continue
        head = "" if primary else f"stack[{j}]."
        params, strength = dict(entry.params), entry.strength
        out.append(
            (
                "defense_params" if primary else f"{head}params",
                params,
                lambda e=entry, k=i: DEFENSES.create(e.name, seed=spec.seed, index=k, **e.params),
            )
        )
        out.append(
            (
                "defense_param" if primary else f"{head}strength",
                strength,
                lambda e=entry, k=i: DEFENSES.create(
                    e.name, strength=e.strength, seed=spec.seed, index=k, **e.params
                ),
            )
        )
    return out


def _train_attack(spec: TrialSpec) -> None:
    from trainables.attacks import ATTACKS

    ATTACKS.create(spec.train_attack, **spec.train_attack_params)
    if not ATTACKS.get(spec.train_attack).info.training_time:
        allowed = [n for n in ATTACKS.names() if ATTACKS.get(n).info.training_time]
        raise ConfigError(
            f"{spec.train_attack!r} is not a training-time attack (list it under attacks:); "
            f"allowed: none, {', '.join(allowed)}"
        )
    from trainables.attacks.tuning_trained import budget

    # its attacker's tuning budget, checked as an attacks: entry's adapt is
    if budget(spec) is not None and (why := adapt_refusal(spec)):
        raise ConfigError(f"train_attack_adapt: {why}")


def adapt_refusal(spec: TrialSpec) -> str | None:
    """Why a training-time attacker of ``spec`` cannot tune on a budget (None: it can):
    its trial trainings stack on the plain NN kind only."""
    from trainables.kinds import kind_of

    if kind_of(spec).name == "nn":
        return None
    return (
        f"its trial trainings stack on the plain NN kind only; ssl_variant="
        f"{spec.ssl_variant!r} trains its own loop"
    )


def _split_scheme(scheme: str) -> None:
    from trainables.data.split import SCHEMES

    if scheme not in SCHEMES:
        hint = did_you_mean(scheme, SCHEMES)
        raise ConfigError(f"unknown split scheme; {hint}allowed: {', '.join(SCHEMES)}")


def _split_params_checks(spec: TrialSpec, varied: set[str]) -> list[tuple[str, Any, Any]]:
    """One check per ``split_params`` key of a VertiBench scheme; a fixed scheme given any
    is refused here unless an axis varies the scheme (those cells are dropped instead)."""
    from trainables.data.vertibench_split import PARAMS, check_param, refuse_params

    def scheme_of(key: str) -> str:  # a varied scheme: the VertiBench scheme taking ``key``
        if spec.split_scheme in PARAMS:
            return spec.split_scheme
        return next((s for s in PARAMS if key in PARAMS[s]), next(iter(PARAMS)))

    if spec.split_scheme in PARAMS or "split_scheme" in varied:
        return [
            (f"split_params.{k}", v, lambda k=k, v=v: check_param(scheme_of(k), k, v))
            for k, v in spec.split_params.items()
        ]
    if not spec.split_params:
        return []
    params = dict(spec.split_params)
    return [("split_params", params, lambda: refuse_params(spec.split_scheme, params))]


def _unknown_ssl(name: str) -> None:
    names = ssl_variant_names()
    raise ConfigError(
        f"unknown ssl_variant {name!r}; {did_you_mean(name, names)}allowed: {', '.join(names)}"
    )


def known_model(name: str) -> None:
    """Refuse a model no kind knows, suggesting from every model name a spec may give (NN
    bottoms, tree models, Paillier LR), while listing the NN bottoms this kind takes."""
    from trainables.models import BOTTOMS
    from trainables.trees import run as tree_run

    if name in BOTTOMS:
        return
    similar = [*tree_run.TREE_MODELS.names(), "paillier_lr"]
    hint = did_you_mean(name, [*BOTTOMS.names(), *similar])
    other = sorted(set(similar) - set(BOTTOMS.names()))
    raise ConfigError(
        f"unknown {BOTTOMS.family} {name!r}; {hint}known: {', '.join(BOTTOMS.names())}"
        + (f" (and {', '.join(other)})" if other else "")
    )


def _no_model_params(spec: TrialSpec) -> None:
    from trainables.kinds import TRIAL_KINDS

    takers = [k for k in TRIAL_KINDS if TRIAL_KINDS.get(k).takes_model_params]
    raise ConfigError(
        f"model {spec.model!r} takes no model_params (its widths are set with hidden); "
        f"allowed: none here; the trial kinds {', '.join(takers)} take model_params"
    )


def count_cells(space: Space) -> tuple[int, dict[str, int]]:
    """Cells the grid (with the ``defenses`` section) expands into, and each axis' size."""
    sizes = {axis: len(values) for axis, values in space.effective_grid().items()}
    return math.prod(sizes.values()), sizes


def check_size(space: Space) -> None:
    """Refuse a grid above ``run.max_cells`` from its axis sizes, before expanding it."""
    count, sizes = count_cells(space)
    limit = space.run.max_cells
    if count <= limit:
        return
    largest = max(sizes, key=lambda a: sizes[a])
    axes = " x ".join(f"{a}: {n}" for a, n in sizes.items())
    raise SpaceError(
        f"{space.source}: grid: {count:,} cells ({axes}) is above run.max_cells={limit:,}; "
        f"allowed: at most {limit:,} cells. Split the space into several files (say one per "
        f"value of grid.{largest}, {sizes[largest]} values), move wide numeric axes into "
        "search: (n_trials per cell instead of every value), or raise run.max_cells"
    )


def check_attack_entry(space: Space, i: int, entry: AttackEntry) -> None:
    """One ``attacks`` entry: a known name, a preset it declares, parameters it takes, each
    of its default's type, and registered ``datasets``."""
    from trainables.attacks import ATTACKS
    from trainables.attacks.tuning import Adapt, check_adapt
    from trainables.data import DATASETS

    where = f"{space.source}: attacks[{i}]"
    try:
        presets = ATTACKS.get(entry.name).presets
        if "preset" in entry.params:
            raise ConfigError("'preset' is not a parameter; give it as the entry's preset key")
    except ConfigError as err:
        raise SpaceError(f"{where}={entry.name!r}: {err}") from None
    if entry.preset is not None and entry.preset not in presets:
        allowed = ", ".join(sorted(presets)) or "none (this attack has no presets)"
        raise SpaceError(
            f"{where}.preset={entry.preset!r}: attack {entry.name!r} has no such preset; "
            f"{did_you_mean(entry.preset, presets)}allowed: {allowed}"
        )
    try:
        ATTACKS.create(entry.name, preset=entry.preset, **entry.params)
        if entry.adapt is not None:
            check_adapt(ATTACKS.get(entry.name), Adapt(**entry.adapt.model_dump()))
    except ConfigError as err:
        raise SpaceError(f"{where}={entry.name!r}: {err}") from None
    for j, name in enumerate(entry.datasets or []):
        if name not in DATASETS:
            raise SpaceError(
                f"{where}.datasets[{j}]={show(name)}: unknown dataset; "
                f"{did_you_mean(name, DATASETS.names())}allowed: {', '.join(DATASETS.names())}"
            )
    defaults = ATTACKS.get(entry.name).defaults
    for key, value in entry.params.items():
        kind = _kind(defaults.get(key))
        if kind is not None and not _fits(value, kind):
            raise SpaceError(
                f"{where}.params.{key}={show(value)}: attack {entry.name!r} takes {kind} here "
                f"(VFLAIR's default {defaults[key]!r}); allowed: {kind}"
            )


def _kind(default: Any) -> str | None:
    if isinstance(default, bool):
        return None
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    return "a string" if isinstance(default, str) else None


def _fits(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "an integer":
        return isinstance(value, int)
    if kind == "a number":
        return isinstance(value, int | float)
    return isinstance(value, str)


def check_search(space: Space) -> None:
    """Each searched value (choices, range ends) checked as a trial field on top of ``base``."""
    assert space.search is not None
    for name, param in space.search.params.items():
        where = f"search.params.{name}"
        if param.choices is not None:
            for j, choice in enumerate(param.choices):
                spec_at(space, apply_value(space.base, name, choice), f"{where}.choices[{j}]")
            continue
        if not param.integer and name in TrialSpec.model_fields and _int_only(name):
            raise SpaceError(
                f"{space.source}: {where}={show(param.model_dump(exclude_defaults=True))}: "
                f"{name} takes integers; allowed: a range with integer: true, or choices"
            )
        for end in ("low", "high"):
            value = getattr(param, end)
            value = int(value) if param.integer else value
            spec_at(space, apply_value(space.base, name, value), f"{where}.{end}")


def _int_only(name: str) -> bool:
    """Whether the trial field ``name`` refuses 1.5 (an Optuna float would fail the trial)."""
    try:
        annotation = TrialSpec.model_fields[name].annotation
        assert annotation is not None  # pydantic sets it on every field of a built model
        TypeAdapter(annotation).validate_python(1.5)
    except ValidationError:
        return True
    return False


def check_local_fit(space: Space, n_parties: list[int], num_cpus: int | None) -> None:
    """Refuse, before Ray starts, a trial this machine's local Ray could never schedule.

    Only for a local Ray this process has not started yet: a cluster's (``--address``) or a
    running Ray's resources are known once connected (``runner.check_fits``).
    """
    res = space.resources
    cpus = num_cpus if num_cpus is not None else (os.cpu_count() or 1)
    gpus = _local_gpus() if res.gpu_per_party > 0 else 0
    check_resource_fit(space, n_parties, cpus, gpus, "this machine's Ray")


def check_resource_fit(
    space: Space, n_parties: list[int], cpus: float, gpus: float, ray_name: str
) -> None:
    """Refuse a trial that needs more CPU or GPU than ``ray_name`` has in all (exit 2)."""
    res = space.resources
    for n in sorted(set(n_parties)):
        cpu = res.cpu_per_trial + n * res.cpu_per_party
        gpu = n * res.gpu_per_party
        if cpu > cpus + 1e-9:
            raise SpaceError(
                f"{space.source}: resources.cpu_per_party={show(res.cpu_per_party)}: a "
                f"{n}-party trial needs {cpu:g} CPU (cpu_per_trial {res.cpu_per_trial:g} + "
                f"{n} x {res.cpu_per_party:g}) but {ray_name} has {cpus:g}; allowed: at "
                f"most {max(cpus - res.cpu_per_trial, 0) / n:g} per party here (or --num-cpus, "
                "or join a bigger cluster with --address)"
            )
        if gpu > gpus + 1e-9:
            raise SpaceError(
                f"{space.source}: resources.gpu_per_party={show(res.gpu_per_party)}: a "
                f"{n}-party trial needs {gpu:g} GPU but {ray_name} has {gpus:g}; allowed: "
                f"{gpus / n:g} or less per party here (0 runs on CPU), or join a cluster "
                "with GPUs with --address"
            )


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
