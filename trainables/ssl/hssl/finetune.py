"""Fine-tuning: plain split VFL under the spec's protocol, from the pretrained encoders.

Each party is an ordinary ``Party`` / ``ActiveParty`` (``trainables.party``) built by the
NN kind's ``party_inits`` (defenses, codecs, message logs and training-time attacks as in
any NN trial) whose bottom starts as the party's pretrained encoder (``Wrapped``
``FTEncoder``: (N, d) clean features -> (N, emb * n_towers)); the active party's top is
one linear layer over concat(H_1..H_K) (``SplitTop`` at ``emb_dim``), trained with Adam
(FedHSSL's fine-tuning: the spec's ``partition`` and ``optimizer`` do not apply here). MP is
AUC on binary tasks, accuracy otherwise (``PartyConfig.metric``).

The fine-tune learning rate is picked from {0.005, 0.01, 0.03} (FedHSSL Appendix B) on a
validation split carved from the labeled rows — never on the test set: each candidate is
an ordinary training whose evaluation rows are the validation rows. The final model is
then trained on all labeled rows at the picked rate and evaluated on the test rows.
Why the options (``FTOptions``): with 200 labels the validation split has 40 rows, too few
to tell the candidates apart, so the pick adds noise to every comparison; ``ft_lr`` fixes
one rate for every variant instead (no candidate trainings). ``ft_mode: probe`` freezes the
pretrained encoder (``Frozen``) so only the linear head trains: full fine-tuning of 160-200
rows can wash pretrained features out, a probe measures them as they are.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from trainables.data import carve_validation
from trainables.jobs import AttackSpec
from trainables.party import Labels
from trainables.protocols import PROTOCOLS
from trainables.spec import TrialSpec
from trainables.ssl.hssl.variants import FTOptions, HSSLData, ft_options
from trainables.transport.group import PartyGroup
from trainables.transport.placement import Placement
from trainables.vfl.training import (
    PreparedTrial,
    Trained,
    party_config,
    party_inits,
    train_prepared,
)

FT_LRS = (0.005, 0.01, 0.03)
VAL_FRACTION = 0.2


@dataclass(frozen=True)
class FineTuned:
    options: FTOptions
    lr: float
    val_mp: dict[float, float]  # lr -> validation MP
    candidates: tuple[Trained, ...]  # the lr-selection trainings (results and reports)
    final: Trained  # the training on all labeled rows at ``lr``, evaluated on the test rows
    before: list[object]  # the final parties before fine-tuning (pretrained bottoms); or []


class Frozen(nn.Module):
    """A pretrained encoder that fine-tuning cannot change (``ft_mode: probe``), its output
    standardised per dimension with the mean / std over the party's own fine-tuning rows.

    Why standardised: a fixed head lr must mean the same for every variant, and the
    representations' scale differs by variant (a random encoder's per-dimension std is a
    fraction of a pretrained one's); the statistics are the party's own, label-free.
    The weights become buffers, so no optimizer sees them; ``anchor`` is a zero parameter
    that keeps the ordinary party code unchanged (it backpropagates H_k and steps an
    optimizer over the bottom's parameters): H_k gets a graph through ``0 * anchor``, whose
    gradient is exactly 0, so Adam leaves it (and so H_k) exactly as it was.
    """

    def __init__(self, encoder: nn.Module, X_fit: np.ndarray) -> None:
        super().__init__()
        self.encoder = copy.deepcopy(encoder)
        for sub in self.encoder.modules():
            for name, p in list(sub._parameters.items()):
                if p is not None:
                    del sub._parameters[name]
                    sub.register_buffer(name, p.detach().clone())
        with torch.no_grad():
            h = self.encoder(torch.as_tensor(X_fit, dtype=torch.float32))  # (n, emb * towers)
        self.register_buffer("mu", h.mean(dim=0))
        self.register_buffer("sd", torch.where(h.std(dim=0) > 1e-8, h.std(dim=0), 1.0))
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, emb * n_towers)
        return (self.encoder(x) - self.mu) / self.sd + 0.0 * self.anchor


def prepared_for(
    spec: TrialSpec,
    data: HSSLData,
    encoders: Sequence[nn.Module],
    lr: float,
    rows: np.ndarray,
    val: np.ndarray | None,
    attacks: Sequence[AttackSpec],
) -> PreparedTrial:
    """One fine-tuning training on ``rows`` (positions among the aligned rows), evaluated
    on the ``val`` rows, or on the test rows when ``val`` is None."""
    protocol = PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    cfg = data.inits[0].config
    width = cfg.widths.emb * len(cfg.towers)  # every encoder's output width
    config = dataclasses.replace(
        party_config(spec, data.n_classes, protocol), partition="split", optimizer="adam",
        lr=lr, emb_dim=width, metric="auc" if data.n_classes == 2 else "accuracy",
    )  # fmt: skip
    aligned = [init.X_local[: init.n_aligned] for init in data.inits]
    X_train = [X[rows] for X in aligned]
    X_eval = list(data.X_test) if val is None else [X[val] for X in aligned]
    y_eval = data.y_test if val is None else data.y_aligned[val]
    labels = Labels(data.y_aligned[rows], y_eval)
    inits = party_inits(spec, config, X_train, X_eval, labels, data.columns, attacks, protocol,
                        data.defenses)  # fmt: skip
    if ft_options(spec).mode == "probe":
        encoders = [Frozen(e, X) for e, X in zip(encoders, X_train, strict=True)]
    inits = tuple(dataclasses.replace(i, bottom=e) for i, e in zip(inits, encoders, strict=True))
    target = spec.target_mp if val is None else None
    return PreparedTrial(inits, protocol, data.defenses, len(rows), target)


def finetune(
    spec: TrialSpec,
    data: HSSLData,
    encoders: Sequence[nn.Module],
    group: PartyGroup,
    placement: Placement,
    attacks: Sequence[AttackSpec],
    keep_before: bool = False,
    keep: bool = False,
) -> FineTuned:
    """Pick the lr on the validation split (or take ``ft_lr``), then fine-tune on all
    labeled rows, all on the parties of ``group`` (rebuilt for each training); the final
    parties come back where ``attacks`` are asked or ``keep``."""
    epochs = int(spec.required("epochs"))
    opt = ft_options(spec)
    candidates: list[Trained] = []
    val_mp: dict[float, float] = {}
    best = opt.lr
    if best is None:
        tr, val = carve_validation(data.labeled, data.y_aligned, VAL_FRACTION, spec.seed)
        for lr in FT_LRS:
            prepared = prepared_for(spec, data, encoders, lr, tr, val, attacks)
            candidates.append(train_prepared(prepared, epochs, placement, False, group=group))
        val_mp = {lr: t.result.mp for lr, t in zip(FT_LRS, candidates, strict=True)}
        best = max(FT_LRS, key=lambda lr: (np.nan_to_num(val_mp[lr], nan=-1.0), -lr))
    final = prepared_for(spec, data, encoders, best, np.asarray(data.labeled), None, attacks)
    before: list[object] = []
    if keep_before:  # the parties as they stand before fine-tuning (actors: copies)
        group.load(final.inits)
        before = group.snapshot()
    trained = train_prepared(final, epochs, placement, bool(attacks) or keep, group=group)
    return FineTuned(opt, best, val_mp, tuple(candidates), trained, before)
