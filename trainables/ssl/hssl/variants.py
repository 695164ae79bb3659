"""FedHSSL-family variants (``TrialSpec.ssl_variant``): names, options, checks, rows.

``splitnn`` (no pretraining), ``local_<m>`` (FedLocal: plain local SSL), ``cssl_<m>``
(cross-party SSL), ``gssl_<m>`` (cross-party + guided local SSL), ``hssl_<m>`` (FedHSSL:
+ partial model aggregation), for m in simsiam, byol, moco. ``trial.py`` runs one spec:
pretraining (``pretrain.py``) then fine-tuning as plain split VFL under the spec's
protocol (``finetune.py``), every NN defense and attack composing with it.

Rows: ``split_for`` picks the aligned rows (``aligned_ratio`` / ``n_aligned``) and
the labeled ones among them, as for every kind; the unaligned training rows are dealt
out disjointly to the parties (different parties' non-aligned rows are different
samples, Fig. 3 of the paper). Each party scales with statistics of its own rows.
Options (``model_params``): see ``OPTIONS``, and ``FTOptions`` for how fine-tuning picks
its lr and what it trains (``ft_lr``, ``ft_mode``; the paper's protocol by default).
``spec.epochs`` / ``batch_size`` are the fine-tuning epochs / batch. Defenses: the spec's
stack hooks the fine-tuning parties as in any NN trial, and the pretraining parties where a
defense acts on what they send there (``representation``: ISO ``target: representation``
or ``both`` at the active party).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainables.data import Dataset, Scaler, default_scaler_kind, split_for
from trainables.defenses import spec_defenses
from trainables.defenses.spec_defenses import HookEntry, SpecDefenses
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.ssl.hssl.augment import IMAGE_AUGS, ImageLayout, TabularLayout, party_fields
from trainables.ssl.hssl.base import Widths
from trainables.ssl.hssl.parties import HSSLConfig, SSLPartyInit
from trainables.ssl.hssl.pretrain import Stages

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
    "head_bn": 1,  # 1: BN in projector / predictor (reference code, Widths.head_bn); 0: plain
}
# fine-tuning protocol (model_params, not numeric options): ``ft_lr`` absent = the paper's
# pick from {0.005, 0.01, 0.03} on a validation split; a number = that lr for every variant
# (no selection). ``ft_mode``: ``full`` (paper: the whole encoder is fine-tuned) or ``probe``
# (the pretrained encoder frozen, only the linear head over concat(H_k) trains).
FT_MODES = ("full", "probe")
FT_KEYS = ("ft_lr", "ft_mode")
# ``image_aug``: the image views' augmentation (``augment.IMAGE_AUGS``; image datasets only)
TEXT_KEYS = (*FT_KEYS, "image_aug")
PRETRAIN_KIND = "representation"  # what cross-party SSL sends (Eq. 5)


@dataclass(frozen=True)
class FTOptions:
    """How fine-tuning picks its lr and what it trains (``model_params`` ft_lr / ft_mode)."""

    lr: float | None = None  # None: pick from FT_LRS on the validation split (paper)
    mode: str = "full"

    @property
    def lr_source(self) -> str:
        return "picked" if self.lr is None else "fixed"


@dataclass(frozen=True)
class Plan:
    """A variant resolved: which steps run and which towers fine-tuning uses."""

    method: str
    stages: Stages | None  # None: no pretraining (splitnn)
    towers: tuple[str, ...]

    @property
    def cross(self) -> bool:
        return self.stages is not None and self.stages.cross

    @property
    def pma(self) -> bool:
        return self.stages is not None and self.stages.pma


@dataclass(frozen=True)
class HSSLData:
    """A spec's rows per party: the pretraining inits (no labels), and what fine-tuning
    needs besides (labels stay here until they go into the active party's init)."""

    inits: tuple[SSLPartyInit, ...]  # party order; the last one is active in fine-tuning
    X_test: tuple[np.ndarray, ...]  # (n_test, d_k) per party, scaled by the party
    columns: tuple[np.ndarray, ...]  # dataset columns per party
    labeled: np.ndarray  # (n_labeled,) positions of the labeled rows among the aligned ones
    y_aligned: np.ndarray  # (n_aligned,) labels of the aligned rows (only labeled ones used)
    y_test: np.ndarray  # (n_test,)
    n_classes: int
    defenses: SpecDefenses  # the spec's, read once: pretraining's and fine-tuning's hooks

    @property
    def n_aligned(self) -> int:
        return self.inits[0].n_aligned

    @property
    def image(self) -> bool:
        return isinstance(self.inits[0].layout, ImageLayout)


def parse_variant(name: str) -> Plan:
    if name == "splitnn":
        return Plan("simsiam", None, ("local",))
    family, _, method = name.partition("_")
    if family not in FAMILIES or method not in METHODS:
        raise ConfigError(f"ssl_variant={name!r} unknown; known: {', '.join(HSSL_VARIANTS)}")
    stages, towers = FAMILIES[family]
    return Plan(method, stages, towers)


def options(spec: TrialSpec) -> dict[str, float]:
    """The numeric pretraining / model options (``OPTIONS``); ft_* keys: ``ft_options``."""
    bad = sorted(set(spec.model_params) - set(OPTIONS) - set(TEXT_KEYS))
    if bad:
        raise ConfigError(
            f"model_params key(s) {bad} are not options of ssl_variant={spec.ssl_variant!r}; "
            f"allowed: {', '.join((*OPTIONS, *TEXT_KEYS))}"
        )
    try:
        out = {k: float(spec.model_params.get(k, v)) for k, v in OPTIONS.items()}
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model_params={spec.model_params}: {err}") from None
    if out["head_bn"] not in (0.0, 1.0):
        raise ConfigError(f"model_params.head_bn={out['head_bn']!r} must be 1 (BN) or 0 (plain)")
    return out


def image_aug(spec: TrialSpec) -> str:
    """``model_params.image_aug`` checked (``light`` by default)."""
    aug = spec.model_params.get("image_aug", "light")
    if aug not in IMAGE_AUGS:
        raise ConfigError(f"model_params.image_aug={aug!r} unknown; known: {', '.join(IMAGE_AUGS)}")
    return str(aug)


def ft_options(spec: TrialSpec) -> FTOptions:
    """``model_params`` ft_lr / ft_mode checked: ConfigError naming the key otherwise."""
    lr = spec.model_params.get("ft_lr")
    if lr is not None:
        ok = isinstance(lr, int | float) and not isinstance(lr, bool)
        if not ok or not math.isfinite(float(lr)) or float(lr) <= 0:
            raise ConfigError(
                f"model_params.ft_lr={lr!r} must be a positive finite number (a fixed "
                f"fine-tuning lr for every variant), or absent to pick it from "
                f"{{0.005, 0.01, 0.03}} on the validation split"
            )
        lr = float(lr)
    mode = spec.model_params.get("ft_mode", "full")
    if mode not in FT_MODES:
        raise ConfigError(
            f"model_params.ft_mode={mode!r} unknown; known: {', '.join(FT_MODES)} (full: "
            "fine-tune the encoder, probe: frozen encoder, linear head only)"
        )
    return FTOptions(lr, str(mode))


def check_hssl(spec: TrialSpec) -> None:
    """ConfigError for a spec this family cannot run (before any data is loaded)."""
    from trainables.protocols import PROTOCOLS

    parse_variant(spec.ssl_variant)
    options(spec)
    ft_options(spec)
    image_aug(spec)
    PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    SpecDefenses.compile(spec)


def hssl_sends(spec: TrialSpec) -> dict[str, tuple[str, ...]]:
    """The message kinds each party sends in ``spec``'s trial: fine-tuning's (as any NN
    trial), plus representations where it pretrains with the other parties (Eq. 5) and
    model shares where it aggregates (to the server)."""
    plan = parse_variant(spec.ssl_variant)
    cross = (PRETRAIN_KIND,) if plan.cross else ()
    share = ("model_share",) if plan.pma else ()
    return {
        "active": (*spec_defenses.PLAIN_SENDS["active"], *cross, *share),
        "passive": (*spec_defenses.PLAIN_SENDS["passive"], *cross, *share),
    }


def hssl_incompatibility(spec: TrialSpec, data_dir: str | Path | None = None) -> str | None:
    """Why a defense of ``spec`` could never act in its trial, or why its rows or parties do
    not fit its dataset, or None."""
    from trainables.data import load_dataset, split_refusal

    reason = SpecDefenses.compile(spec).incompatibility(hssl_sends(spec))
    if reason is not None:
        if PRETRAIN_KIND in reason and not parse_variant(spec.ssl_variant).cross:
            reason += (
                f" (ssl_variant={spec.ssl_variant!r} has no cross-party pretraining, so "
                "no representations are exchanged; use a cssl_*/gssl_*/hssl_* variant)"
            )
        return reason
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    if "image_aug" in spec.model_params and ds.image_shape is None:
        return (
            f"model_params.image_aug={spec.model_params['image_aug']!r} sets the image views' "
            f"augmentation, but dataset {spec.dataset!r} is tabular (its views are corrupted "
            "rows); leave image_aug out"
        )
    if ds.image_shape is not None and spec.split_scheme in ("importance", "correlation"):
        return (
            f"split_scheme={spec.split_scheme!r} scatters image pixels among parties, but "
            f"HSSL's image views crop and flip each party's image region; use auto, halves, "
            "quarters or stripes on an image dataset"
        )
    return split_refusal(spec, ds)


def pretrain_hooks(stack: SpecDefenses) -> dict[int, list[HookEntry]]:
    """The stack's defense hook entries per party that act on what pretraining sends
    (``representation``); the others act in fine-tuning only."""
    out: dict[int, list[HookEntry]] = {}
    for k, entries in stack.hook_entries().items():
        for family, name, params in entries:
            kinds = stack.defenses[params["index"]].targets()
            if kinds is not None and PRETRAIN_KIND in kinds:
                out.setdefault(k, []).append((family, name, params))
    return out


def iso_target(spec: TrialSpec) -> str | None:
    """What ISO noises in ``spec`` (``gradient`` by default); None without ISO."""
    if spec.defense != "iso":
        return None
    return str(spec.defense_params.get("target", "gradient"))


def hssl_config(spec: TrialSpec, plan: Plan, opt: dict[str, float]) -> HSSLConfig:
    proj_out = int(opt["moco_dim"]) if plan.method == "moco" else int(opt["proj"])
    return HSSLConfig(
        method=plan.method, towers=plan.towers, n_parties=spec.n_parties, seed=spec.seed,
        widths=Widths(int(opt["hidden"]), int(opt["emb"]), int(opt["proj"]), proj_out,
                      int(opt["pred"]), head_bn=bool(opt["head_bn"])),
        pretrain_batch=int(opt["pretrain_batch"]), queue=int(opt["queue"]), tau=opt["tau"],
    )  # fmt: skip


def prepare(spec: TrialSpec, ds: Dataset, record: bool = False) -> HSSLData:
    """The pretraining inits (active last, no labels anywhere) and the fine-tuning rows."""
    plan = parse_variant(spec.ssl_variant)
    cfg = hssl_config(spec, plan, options(spec))
    split = split_for(spec, ds)
    columns, s = split.columns, split.rows
    own = np.array_split(np.random.default_rng([spec.seed, 11]).permutation(s.unaligned),
                         spec.n_parties)  # fmt: skip
    stack = SpecDefenses.compile(spec)
    hooks = pretrain_hooks(stack)
    kind = default_scaler_kind(ds)
    inits, X_test = [], []
    for k, cols in enumerate(columns):
        raw = ds.X_train[np.concatenate([s.aligned, np.sort(own[k])])][:, cols]
        scaler = Scaler.fit(raw, kind)
        X = scaler.transform(raw)
        X_test.append(scaler.transform(ds.X_test[:, cols]))
        inits.append(
            SSLPartyInit(
                party_id=k, config=cfg, X_local=X, n_aligned=len(s.aligned),
                layout=_layout(ds, cols, X, scaler, image_aug(spec)), record=record,
                hooks=tuple(hooks.get(k, ())),
            )
        )  # fmt: skip
    return HSSLData(
        tuple(inits), tuple(X_test), tuple(columns),
        labeled=np.searchsorted(s.aligned, s.labeled), y_aligned=ds.y_train[s.aligned],
        y_test=ds.y_test, n_classes=ds.n_classes, defenses=stack,
    )  # fmt: skip


def _layout(
    ds: Dataset, cols: np.ndarray, X: np.ndarray, scaler: Scaler, aug: str
) -> ImageLayout | TabularLayout:
    if ds.image_shape is not None:
        h = ds.image_shape[0]
        return ImageLayout((h, len(cols) // h), aug)
    off = scaler.transform(np.zeros((1, len(cols))))[0]
    fields = party_fields(ds.feature_groups, cols)
    return TabularLayout(fields, X.min(axis=0), X.max(axis=0), off)
