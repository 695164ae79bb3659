"""Split-VFL fine-tuning of the pretrained encoders on the labeled aligned rows.

The fine-tune learning rate is picked from {0.005, 0.01, 0.03} (FedHSSL Appendix B) on a
validation split carved from the labeled rows — never on the test set — and the final
model is then fine-tuned on all labeled rows at the picked rate. Per batch: each passive
party sends H_k up ("embedding"), the active party computes the loss over
concat(H_1..H_K) and sends dL/dH_k down ("gradient", where ISO on gradients applies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainables.messages import BatchSchedule
from trainables.ssl.hssl.pretrain import Wire

FT_LRS = (0.005, 0.01, 0.03)
VAL_FRACTION = 0.2


@dataclass(frozen=True)
class FineTuneResult:
    lr: float
    val_mp: dict[float, float]  # lr -> validation MP
    mp: float  # test MP of the final model


def carve_validation(labeled: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) positions: a seeded VAL_FRACTION of the labeled rows (at least 1)."""
    rng = np.random.default_rng([seed, 4049])
    order = rng.permutation(np.asarray(labeled))
    n_val = max(1, round(VAL_FRACTION * len(order)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def train(wire: Wire, lr: float, rows: np.ndarray, epochs: int, batch: int, salt: int) -> None:
    """Fine-tune all parties from their pretrained encoders on ``rows``."""
    active = wire.n - 1
    wire.call_all("ft_reset", lr, rows, salt)
    sched = BatchSchedule(len(rows), batch, 0)  # only the number of batches is used here
    for epoch in range(epochs):
        for ref in sched.refs(epoch):
            ups = wire.call_many([(k, "ft_forward", (ref,)) for k in range(active)])
            wire.carried("finetune", ups)
            downs = wire.call(active, "ft_step", ref, ups)
            wire.carried("finetune", downs)
            wire.call_many([(k, "ft_backward", (downs[k],)) for k in range(active)])
            wire.rounds += 1


def score(wire: Wire, split: str, rows: np.ndarray | None = None) -> float:
    active = wire.n - 1
    ups = wire.call_many([(k, "ft_embed", (split, rows)) for k in range(active)])
    wire.carried("eval", ups)
    return float(wire.call(active, "ft_score", split, ups, rows))


def finetune(wire: Wire, labeled: np.ndarray, epochs: int, batch: int, seed: int) -> FineTuneResult:
    """Pick the lr on the validation split, then fine-tune on all labeled rows."""
    tr, val = carve_validation(labeled, seed)
    val_mp = {}
    for i, lr in enumerate(FT_LRS):
        train(wire, lr, tr, epochs, batch, salt=i)
        val_mp[lr] = score(wire, "val", val)
    best = max(FT_LRS, key=lambda lr: (np.nan_to_num(val_mp[lr], nan=-1.0), -lr))
    train(wire, best, np.asarray(labeled), epochs, batch, salt=len(FT_LRS))
    return FineTuneResult(best, val_mp, score(wire, "test"))
