"""The planner: a validated space in, a frozen plan of trainings out.

Bad values are errors (exit 2, naming ``base.<key>`` or ``grid.<axis>[i]``); cells that
are valid one value at a time but cannot run together (say 40 parties on a 30-feature
dataset) are dropped with their reason, printed and kept in the plan. Identical cells
collapse into one training (its ``config_hash``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep_engine.space import Space, SpaceError, apply_value, check_axis_name
from sweep_engine.validate import (
    adapt_refusal,
    check_attack_entry,
    check_search,
    check_size,
    model_params_reason,
    spec_at,
)
from trainables.attacks import ATTACKS
from trainables.attacks.tuning_trained import budget, trainings
from trainables.data import load_dataset
from trainables.data.catalog import known_classes
from trainables.errors import ConfigError, MissingDataError
from trainables.kinds import kind_of
from trainables.spec import TrialSpec
from trainables.trial import actor_count, attack_incompatibility, incompatibility

AttackSpec = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Training:
    """One training to run: its spec, the inference-time attacks that share it, its id."""

    spec: TrialSpec
    cell: dict[str, Any] = field(hash=False, compare=False)
    search: bool = False  # a search cell: Optuna fills the searched fields per trial
    attacks: tuple[AttackSpec, ...] = field(default=(), hash=False, compare=False)

    @functools.cached_property
    def trial_id(self) -> str:
        """The spec's hash, extended by the attacks it serves (adding one re-runs it).
        Once per training (frozen; ``dataclasses.replace`` builds a new one)."""
        if not self.attacks:
            return self.spec.config_hash
        blob = json.dumps([self.spec.config_hash, list(self.attacks)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def n_evaluations(self) -> int:
        """Attack records the training writes: its kind's stages count apart (FedHSSL's MC
        writes ``mc_pretrained`` and ``mc``), as the records will show them."""
        asked = [name for name, _ in self.attacks]
        shared = len(kind_of(self.spec).evaluations(self.spec, asked)) if asked else 0
        return shared + int(self.spec.train_attack != "none")


@dataclass(frozen=True)
class Dropped:
    cell: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Plan:
    space: Space
    trainings: tuple[Training, ...]  # for a search space: one per cell (a study each)
    dropped: tuple[Dropped, ...]
    duplicates: int
    # data files absent at planning (``expand(missing_ok=True)``, a dry run): the cells
    # that need them are planned unchecked, and a real run refuses to start
    missing_data: tuple[str, ...] = ()

    @property
    def n_trainings(self) -> int:
        n_trials = self.space.search.n_trials if self.space.search else 1
        return len(self.trainings) * n_trials

    @property
    def n_evaluations(self) -> int:
        """Attack evaluations; one training serves all inference-time attacks of a cell."""
        n_trials = self.space.search.n_trials if self.space.search else 1
        return sum(t.n_evaluations for t in self.trainings) * n_trials

    @property
    def n_adapted(self) -> int:
        """Evaluations whose attacker also tunes its attack (``adapt``): one more record each."""
        n_trials = self.space.search.n_trials if self.space.search else 1
        tuned = sum(1 for t in self.trainings for _, p in t.attacks if "adapt" in p)
        tuned += sum(1 for t in self.trainings if budget(t.spec) is not None)
        return tuned * n_trials

    @property
    def n_trial_trainings(self) -> int:
        """Trainings beyond ``n_trainings`` that adapted training-time attackers train,
        one per trial setting but their default (``tuning_trained``): the stated budget."""
        n_trials = self.space.search.n_trials if self.space.search else 1
        return sum(trainings(t.spec) - 1 for t in self.trainings) * n_trials

    def bundles(self, n_parties: int) -> list[dict[str, float]]:
        """The placement group of one trial: the trial's bundle, then one per party."""
        res = self.space.resources
        party = {
            "CPU": res.cpu_per_party,
            **({"GPU": res.gpu_per_party} if res.gpu_per_party else {}),
        }
        head = {"CPU": res.cpu_per_trial} if res.cpu_per_trial > 0 else {"memory": float(1 << 20)}
        return [head] + [dict(party) for _ in range(n_parties)]

    def summary(self) -> dict[str, Any]:
        shapes = sorted({actor_count(t.spec) for t in self.trainings})
        return {
            "space": self.space.name,
            "source": self.space.source,
            "trainings": self.n_trainings,
            "evaluations": self.n_evaluations,
            "adapted_evaluations": self.n_adapted,
            "attacker_trial_trainings": self.n_trial_trainings,
            "defaults_applied": self.space.defaults_applied,
            "dropped": len(self.dropped),
            "duplicates_merged": self.duplicates,
            "search": None
            if self.space.search is None
            else {"cells": len(self.trainings), "trials_per_cell": self.space.search.n_trials},
            "dropped_cells": [{"cell": d.cell, "reason": d.reason} for d in self.dropped],
            "trial_resources": {f"{k}_parties": self.bundles(k) for k in shapes},
            "transport": self.space.run.transport,
            "missing_data": list(self.missing_data),
        }


def _spec(space: Space, fields: dict[str, Any], where: str) -> TrialSpec:
    return spec_at(space, fields, where)


def _check_values(space: Space) -> None:
    """Each base key and each grid value alone on top of ``base``: errors name their path."""
    for key in space.base:
        check_axis_name(space, key, f"base.{key}")
    _spec(space, space.base, "base")
    _check_defenses(space)
    for axis, values in space.grid.items():
        check_axis_name(space, axis, f"grid.{axis}")
        for i, value in enumerate(values):
            if isinstance(value, dict) and "." not in axis:
                for key in value:
                    check_axis_name(space, key, f"grid.{axis}[{i}].{key}")
            _spec(space, apply_value(space.base, axis, value), f"grid.{axis}[{i}]")
    if space.search:
        for name in space.search.params:
            check_axis_name(space, name, f"search.params.{name}")
        check_search(space)
    for i, entry in enumerate(space.attack_entries()):
        check_attack_entry(space, i, entry)


def _check_defenses(space: Space) -> None:
    """Each entry of the ``defenses`` section: a known name, valid strengths and params."""
    for name, axis in space.defense_axes().items():
        if name == "none":
            continue
        strengths = axis.strengths if axis.strengths is not None else [None]
        for i, strength in enumerate(strengths):
            where = f"defenses.{name}" + ("" if axis.strengths is None else f"[{i}]={strength!r}")
            fields = {
                **space.base,
                "defense": name,
                "defense_param": strength,
                "defense_params": dict(axis.params),
            }
            _spec(space, fields, where)


def _attack_cells(
    space: Space, spec: TrialSpec, n_classes: int, cell: dict[str, Any]
) -> tuple[list[Training], list[Dropped]]:
    """The clean training with every applicable inference-time attack, plus one training
    per training-time attack; attacks that cannot apply here are dropped with a reason."""
    shared: list[AttackSpec] = []
    own: list[Training] = []
    dropped: list[Dropped] = []
    search = space.search is not None
    for entry in space.attack_entries():
        if entry.datasets is not None and spec.dataset not in entry.datasets:
            continue  # the space restricts this attack to other datasets
        info = ATTACKS.get(entry.name).info
        family = attack_incompatibility(spec, entry.name)  # what the trial kind can host
        if family is not None:
            dropped.append(Dropped({**cell, "attack": entry.name}, family))
        elif info.binary_only and n_classes != 2:
            reason = f"attack {entry.name!r} is binary-only; {spec.dataset} has {n_classes} classes"
            dropped.append(Dropped({**cell, "attack": entry.name}, reason))
        elif info.training_time and entry.adapt is not None and (why := adapt_refusal(spec)):
            dropped.append(Dropped({**cell, "attack": entry.name}, f"attack {entry.name!r}: {why}"))
        elif info.training_time:
            params = entry.attack_params()
            update = {
                "train_attack": entry.name,
                "train_attack_params": {k: v for k, v in params.items() if k != "adapt"},
                "train_attack_adapt": params.get("adapt", {}),
            }
            tampered = spec.updated(**update)  # a procedure's attack parameters fill in
            own.append(Training(tampered, {**cell, "attack": entry.name}, search=search))
        else:
            shared.append((entry.name, entry.attack_params()))
    return [Training(spec, cell, search=search, attacks=tuple(shared)), *own], dropped


def _n_classes(space: Space, spec: TrialSpec, data_dir: str | Path | None) -> int:
    """The dataset's class count: from its files, else from the catalog (missing files)."""
    try:
        return load_dataset(spec.dataset, data_dir, **spec.dataset_params).n_classes
    except MissingDataError as err:
        known = known_classes(spec.dataset, dict(spec.dataset_params))
        if known is None:
            raise SpaceError(f"{space.source}: {err}") from None
        return known


def expand(space: Space, data_dir: str | Path | None = None, missing_ok: bool = False) -> Plan:
    """Every grid cell as a training, dropped cells with reasons, duplicates merged.

    A missing data file is an error (naming it), unless ``missing_ok`` (a dry run): then
    the cells that need it are planned without the checks that read data (too many
    parties for its columns, too few rows) and ``Plan.missing_data`` names the files.
    """
    check_size(space)  # from the axis sizes: a huge grid is refused before it is expanded
    _check_values(space)
    grid = space.effective_grid()
    axes = list(grid)
    trainings: dict[str, Training] = {}
    dropped: list[Dropped] = []
    missing: set[str] = set()
    duplicates = 0
    for combo in itertools.product(*(grid[a] for a in axes)):
        fields, cell = dict(space.base), {}
        for axis, value in zip(axes, combo, strict=True):
            fields = apply_value(fields, axis, value)
            cell[axis] = value
        try:
            spec = TrialSpec.build(**fields)
            reason = model_params_reason(spec) or incompatibility(spec, data_dir)
        except MissingDataError as err:
            if not missing_ok:
                raise SpaceError(f"{space.source}: {err}") from None
            missing.add(str(err))
            reason = None
        except ConfigError as err:
            reason = str(err)
        if reason is not None:
            dropped.append(Dropped(cell, reason))
            continue
        n_classes = _n_classes(space, spec, data_dir)
        cell_trainings, cell_dropped = _attack_cells(space, spec, n_classes, cell)
        dropped += cell_dropped
        for training in cell_trainings:
            if training.trial_id in trainings:
                duplicates += 1
            else:
                trainings[training.trial_id] = training
    if not trainings:
        raise SpaceError(
            f"{space.source}: grid: every cell was dropped; reasons: "
            + "; ".join(sorted({d.reason for d in dropped}))
        )
    return Plan(
        space, tuple(trainings.values()), tuple(dropped), duplicates, tuple(sorted(missing))
    )
