"""FedHSSL-family variants (``TrialSpec.ssl_variant``): names, data preparation, one trial.

``splitnn`` (no pretraining), ``local_<m>`` (FedLocal: plain local SSL), ``cssl_<m>``
(cross-party SSL), ``gssl_<m>`` (cross-party + guided local SSL), ``hssl_<m>`` (FedHSSL:
+ partial model aggregation), for m in simsiam, byol, moco. Pretraining runs each party
in its own Ray actor (``transport='ray'``) or in-process (``'local'``), then the VFL model
is fine-tuned on the ``n_labeled`` labeled aligned rows (``finetune.py``).

Rows: ``split_samples`` picks the aligned rows (``aligned_ratio`` / ``n_aligned``) and
the labeled ones among them; the unaligned training rows are dealt out disjointly to the
parties (different parties' non-aligned rows are different samples, Fig. 3 of the
paper). Each party scales with statistics of its own rows.
Options (``model_params``): see ``OPTIONS``. ``spec.epochs`` / ``batch_size`` are the
fine-tuning epochs / batch. ISO (``defense='iso'``) applies at the active party, on its
pretraining representations (``target: representation``), its fine-tuning gradients
(``target: gradient``) or both (``target: both``). Variants without cross-party
pretraining (``splitnn``, ``local_*``) exchange no representations: ``target:
representation`` is dropped there by the planner (``hssl_incompatibility``) and fails at
run time (``DefenseNeverApplied``) if run anyway; ``both`` noises the gradients only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainables.data import Dataset, Scaler, default_scaler_kind, split_samples, vertical_split
from trainables.defenses import stack as defense_stack
from trainables.errors import ConfigError
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.ssl.hssl.augment import ImageLayout, TabularLayout, party_fields
from trainables.ssl.hssl.base import Widths
from trainables.ssl.hssl.finetune import finetune
from trainables.ssl.hssl.mc import run_mc, stage_extra
from trainables.ssl.hssl.parties import HSSLConfig, HSSLLabels, SSLPartyInit
from trainables.ssl.hssl.pretrain import Stages, Wire, pretrain

METHODS = ("simsiam", "byol", "moco")
FAMILIES: dict[str, tuple[Stages, tuple[str, ...]]] = {
    "local": (Stages(cross=False, local=True, pma=False), ("local",)),
    "cssl": (Stages(cross=True, local=False, pma=False), ("cross",)),
    "gssl": (Stages(cross=True, local=True, pma=False), ("cross", "local")),
    "hssl": (Stages(cross=True, local=True, pma=True), ("cross", "local")),
}
HSSL_VARIANTS = ("splitnn", *(f"{f}_{m}" for f in FAMILIES for m in METHODS))
# model_params keys and defaults (paper: 10-40 global iterations, batch 512, gamma 0.5)
OPTIONS: dict[str, float | int] = {
    "pretrain_epochs": 10,
    "pretrain_batch": 512,
    "gamma": 0.5,
    "hidden": 128,
    "emb": 64,
    "proj": 512,
    "pred": 128,
    "moco_dim": 128,
    "queue": 4096,
    "tau": 0.5,
}
MC_ATTACKS = ("mc",)


@dataclass(frozen=True)
class Plan:
    """A variant resolved: which steps run and which towers fine-tuning uses."""

    method: str
    stages: Stages | None  # None: no pretraining (splitnn)
    towers: tuple[str, ...]


def parse_variant(name: str) -> Plan:
    if name == "splitnn":
        return Plan("simsiam", None, ("local",))
    family, _, method = name.partition("_")
    if family not in FAMILIES or method not in METHODS:
        raise ConfigError(f"ssl_variant={name!r} unknown; known: {', '.join(HSSL_VARIANTS)}")
    stages, towers = FAMILIES[family]
    return Plan(method, stages, towers)


def options(spec: TrialSpec) -> dict[str, float]:
    bad = sorted(set(spec.model_params) - set(OPTIONS))
    if bad:
        raise ConfigError(
            f"model_params key(s) {bad} are not options of ssl_variant={spec.ssl_variant!r}; "
            f"allowed: {', '.join(OPTIONS)}"
        )
    try:
        return {k: float(spec.model_params.get(k, v)) for k, v in OPTIONS.items()}
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model_params={spec.model_params}: {err}") from None


def check_hssl(spec: TrialSpec) -> None:
    """ConfigError for a spec this family cannot run (before any data is loaded)."""
    parse_variant(spec.ssl_variant)
    options(spec)
    if spec.defense not in ("none", "iso") or spec.stack:
        raise ConfigError(
            f"ssl_variant={spec.ssl_variant!r}: defense={spec.defense!r} (stack "
            f"{len(spec.stack)}); allowed: none, iso (no stack)"
        )
    if spec.defense == "iso":
        from trainables.defenses import DEFENSES

        # checks lambda, refuses the old name ``on`` and bad targets
        DEFENSES.create("iso", strength=iso_strength(spec), **spec.defense_params)
        extra = sorted(set(spec.defense_params) - {"target"})
        if extra:
            raise ConfigError(f"defense_params keys {extra} unknown for iso here; allowed: target")


def iso_target(spec: TrialSpec) -> str | None:
    """What ISO noises in ``spec`` (``gradient`` by default); None without ISO."""
    if spec.defense != "iso":
        return None
    return str(spec.defense_params.get("target", "gradient"))


def iso_sends(spec: TrialSpec) -> tuple[str, ...]:
    """What the active party of ``spec``'s variant sends: fine-tuning gradients, and
    representations only where it pretrains with the other parties (Eq. 5)."""
    stages = parse_variant(spec.ssl_variant).stages
    return ("representation", "gradient") if stages is not None and stages.cross else ("gradient",)


def iso_hooks(spec: TrialSpec) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The active party's ISO defenses, one per exchange it noises."""
    target = iso_target(spec)
    if target is None:
        return ()
    targets = ("representation", "gradient") if target == "both" else (target,)
    return tuple(
        ("iso", {"strength": iso_strength(spec), "seed": spec.seed, "index": i, "target": t})
        for i, t in enumerate(targets)
    )


def iso_strength(spec: TrialSpec) -> float | None:
    """The ISO lambda applied (the registry's default when the spec leaves it unset)."""
    if spec.defense != "iso":
        return None
    from trainables.defenses import DEFENSES

    default = DEFENSES.get("iso").info.grid[0]  # type: ignore[attr-defined]
    return float(default if spec.defense_param is None else spec.defense_param)


def prepare(spec: TrialSpec, ds: Dataset, record: bool = False) -> tuple[SSLPartyInit, ...]:
    """One init per party (active last); only the active one carries labels."""
    plan = parse_variant(spec.ssl_variant)
    opt = options(spec)
    columns = vertical_split(ds, spec.n_parties, spec.split_scheme)
    s = split_samples(
        len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed, y=ds.y_train,
        n_aligned=spec.n_aligned,
    )  # fmt: skip
    own = np.array_split(np.random.default_rng([spec.seed, 11]).permutation(s.unaligned),
                         spec.n_parties)  # fmt: skip
    labeled_pos = np.searchsorted(s.aligned, s.labeled)  # positions among the aligned rows
    moco = plan.method == "moco"
    proj_out = int(opt["moco_dim"]) if moco else int(opt["proj"])
    cfg = HSSLConfig(
        method=plan.method, towers=plan.towers, n_parties=spec.n_parties,
        n_classes=ds.n_classes, seed=spec.seed, gamma=opt["gamma"],
        widths=Widths(int(opt["hidden"]), int(opt["emb"]), int(opt["proj"]), proj_out,
                      int(opt["pred"])),
        pretrain_batch=int(opt["pretrain_batch"]), ft_batch=int(spec.batch_size),  # type: ignore[arg-type]
        queue=int(opt["queue"]), tau=opt["tau"],
    )  # fmt: skip
    kind = default_scaler_kind(ds)
    inits = []
    for k, cols in enumerate(columns):
        rows = np.concatenate([s.aligned, np.sort(own[k])])
        raw = ds.X_train[rows][:, cols]
        scaler = Scaler.fit(raw, kind)
        X = scaler.transform(raw)
        active = k == spec.n_parties - 1
        inits.append(
            SSLPartyInit(
                party_id=k, config=cfg, X_local=X, n_aligned=len(s.aligned),
                X_test=scaler.transform(ds.X_test[:, cols]),
                layout=_layout(ds, cols, X, scaler), labeled=labeled_pos,
                labels=HSSLLabels(ds.y_train[s.labeled], ds.y_test) if active else None,
                defenses=iso_hooks(spec) if active else (), record=record,
            )
        )  # fmt: skip
    return tuple(inits)


def _layout(ds: Dataset, cols: np.ndarray, X: np.ndarray, scaler: Scaler) -> Any:
    if ds.image_shape is not None:
        h = ds.image_shape[0]
        return ImageLayout((h, len(cols) // h))
    off = scaler.transform(np.zeros((1, len(cols))))[0]
    fields = party_fields(ds.feature_groups, cols)
    return TabularLayout(fields, X.min(axis=0), X.max(axis=0), off)


@contextmanager
def open_wire(inits: Sequence[SSLPartyInit], transport: str, cpu: float, gpu: float,
              address: str | None, reuse: bool) -> Iterator[Wire]:  # fmt: skip
    """Parties in-process, or one per actor (the generic ``PartyActor``)."""
    if transport == "local":
        yield Wire([init.build() for init in inits], remote=False)
        return
    from trainables.transport.ray_actors import PartyResources, RayParties, ensure_ray

    ensure_ray(address, num_cpus=None)
    with RayParties(inits, PartyResources(cpu, gpu), reuse=reuse) as group:  # type: ignore[arg-type]
        yield Wire(group.actors, remote=True)


def run_hssl_trial(
    spec: TrialSpec,
    ds: Dataset | None = None,
    *,
    transport: str = "local",
    data_dir: str | Path | None = None,
    cpu_per_party: float = 1.0,
    gpu_per_party: float = 0.0,
    address: str | None = None,
    sweep: str = "",
    trial_id: str = "",
    reuse_actors: bool = False,
    attacks: Sequence[Any] = (),
) -> list[Record]:
    """Pretrain, fine-tune, attack: the clean record, then one per MC stage if asked."""
    check_hssl(spec)
    if ds is None:
        from trainables.data import load_dataset

        ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    names = [a[0] if isinstance(a, (tuple, list)) else str(a) for a in attacks]
    unknown = sorted(set(names) - set(MC_ATTACKS))
    if unknown:
        raise ConfigError(f"ssl_variant={spec.ssl_variant!r}: attacks {unknown}; allowed: mc")
    mc_params = next((dict(a[1]) for a in attacks if isinstance(a, (tuple, list))), {})
    plan = parse_variant(spec.ssl_variant)
    opt = options(spec)
    inits = prepare(spec, ds)
    n_al = inits[0].n_aligned
    start = time.perf_counter()
    with open_wire(inits, transport, cpu_per_party, gpu_per_party, address, reuse_actors) as wire:
        pre = None
        if plan.stages is not None:
            pre = pretrain(wire, plan.stages, int(opt["pretrain_epochs"]), n_al,
                           int(opt["pretrain_batch"]), opt["gamma"], spec.seed)  # fmt: skip
        pre_rounds, pre_bytes = wire.rounds, wire.comm_bytes
        encoders = {"pretrained": wire.call(0, "pretrained_encoder")} if names else {}
        ft = finetune(wire, inits[0].labeled, int(spec.epochs), int(spec.batch_size), spec.seed)  # type: ignore[arg-type]
        if names:
            encoders["finetuned"] = wire.call(0, "finetuned_encoder")
        rounds, nbytes = wire.rounds, wire.comm_bytes
        reports = wire.call_all("defense_applied")
    seconds = time.perf_counter() - start
    # ``both`` is two ISO hooks of one spec entry: merged by name, it must act on either
    applied = json.loads(defense_stack.checked_extra(reports, by="name"))
    extra = {
        "ft_lr": ft.lr, "val_mp": {str(k): v for k, v in ft.val_mp.items()},
        "pretrain_seconds": round(pre.seconds, 3) if pre else 0.0,
        "pretrain_rounds": pre_rounds, "pretrain_bytes": pre_bytes,
        "cross_loss": [round(v, 4) for v in pre.cross_loss] if pre else [],
        "local_loss": [round(v, 4) for v in pre.local_loss] if pre else [],
        "metric": "auc" if ds.n_classes == 2 else "accuracy", "options": opt,
        "iso_target": iso_target(spec), **applied,
    }  # fmt: skip
    clean = Record.clean(
        spec, len(inits[0].labeled), defense_party="active" if spec.defense == "iso" else "",
        defense_param=iso_strength(spec),
        mp=ft.mp, rounds=rounds, comm_bytes=nbytes,
        train_seconds=round(seconds, 4), sweep=sweep,
        trial_id=trial_id or spec.config_hash, extra=json.dumps(extra, sort_keys=True),
    )  # fmt: skip
    records = [clean]
    for stage, encoder in encoders.items():
        out = run_mc(encoder, inits[0], inits[-1], mc_params, spec.seed)
        name = "mc" if stage == "finetuned" else "mc_pretrained"
        records.append(clean.__class__(**{
            **clean.to_dict(), "attack": name, "attack_type": "LI", "attacker_party": 0,
            "ap": out.ap, "attack_seconds": round(out.seconds, 4),
            "extra": json.dumps({**extra, "mc_stage": stage, **stage_extra(out.extra, name)},
                                sort_keys=True),
        }))  # fmt: skip
    return records


def hssl_incompatibility(spec: TrialSpec, data_dir: str | Path | None = None) -> str | None:
    """Why ``spec``'s rows or parties do not fit its dataset, or None."""
    from trainables.data import load_dataset

    target, neutral = iso_target(spec), iso_strength(spec) == 0.0
    if target == "representation" and not neutral and "representation" not in iso_sends(spec):
        return (
            f"defense iso (target=representation) would never apply: ssl_variant="
            f"{spec.ssl_variant!r} has no cross-party pretraining, so the active party sends "
            "no representations (only fine-tuning gradients); use target: gradient or both, "
            "or a cssl_*/gssl_*/hssl_* variant"
        )
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    try:
        vertical_split(ds, spec.n_parties, spec.split_scheme)
        split_samples(len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed,
                      n_aligned=spec.n_aligned)  # fmt: skip
    except ConfigError as err:
        return str(err)
    return None
