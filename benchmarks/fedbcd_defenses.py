"""``python -m benchmarks.fedbcd_defenses``: why MID takes NS and DS to chance under FedBCD.

Issue 42, part 5: on adult (aggVFL) MID at lambda = 0.01 leaves the norm-scoring attack at
an advantage of ~0.63 under FedSGD but at chance under FedBCD (Q = 5). This benchmark
trains FedSGD and FedBCD with and without MID and measures, at the last epoch, what the
passive party received and what its side of the model had become. Two splits of FedBCD say
which party's local steps matter: ``fedbcd-passive-q1`` (the active party takes Q local
steps, MID runs Q times per exchange, the passive party one step per gradient) and
``fedbcd-active-q1`` (the passive party reuses each gradient for Q steps, the active party
takes one). Per variant and cell, mean over seeds:

- ``mp``, and ``mp_without_passive``: the MP with the passive party's test embeddings
  replaced by the mean of its training embeddings (what the model gets from the passive
  party is the difference);
- ``ns`` / ``ds``: the attacks' AUC, advantage and collapse (share of rows tied at one
  score) on the gradients the passive party received;
- ``h_norm``, ``grad_norm``, ``zero_gradients``: mean |H| the passive party sent, mean
  |dL/dH| it received and the share of rows whose gradient was exactly 0, each row at its
  last exchange; ``mid_mu`` / ``mid_sigma``: the bottleneck's mean |mu| and sigma on the
  training rows after training (the prior is 0 and 1), ``mid_decoder_on``: the share of
  its decoder's hidden ReLUs on there at z = mu; ``residual``: mean 1 - p(y) of each row
  at its last exchange (how well the training rows were fit);
- the received gradient split (``ExchangeProbe``) into its *label part* dCE/dH through the
  bottleneck and its *defense part* d(lambda KL)/dH, with NS scored on each part alone;
- ``gradients_received`` per training and the defenses' ``applied`` counts.

What the numbers show (adult): docs/defenses.md, "MID under FedBCD". Prints ONE JSON
object. ``--dataset adult`` needs ``shared/datasets/adult``; breast_cancer is embedded
(sklearn) and runs in seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from trainables.attacks import chance
from trainables.attacks.base import LabelGuess
from trainables.attacks.harness import run_attacks
from trainables.data import load_dataset
from trainables.defenses.stacked import StackedHook
from trainables.messages import BatchRef, Message
from trainables.protocols.base import Protocol, TrainResult
from trainables.spec import TrialSpec
from trainables.transport.group import LocalGroup
from trainables.trial import prepare_parties
from trainables.vfl.stacked_party import StackedParty, StackedPartyInit
from trainables.vfl.stacked_rounds import StackedPassives, StackedRounds

ATTACKS = [("ns", {}), ("ds", {})]


class ProbeForm(StackedHook):
    """The probe at the active stack of one training: at each exchange, before any
    gradient leaves, the objective's and the label loss's gradients w.r.t. the passive
    embeddings, from the logits the exchange computed (MID's bottleneck with its
    parameters and noise draw of the exchange), and each row's fit. Changes nothing:
    the gradients go on as they came, the defenses' counts are restored."""

    messages = True  # the gradient messages pass its member (``ExchangeProbe.on_send``)
    model = True

    def install(self, stack: Any) -> None:
        self.stack = stack

    def on_forward(
        self, stack: Any, rows: torch.Tensor, h: torch.Tensor, payload: Any
    ) -> tuple[torch.Tensor, Any]:
        self.rows = rows[0]  # (B,) the exchange's rows (a stack of one)
        return h, payload

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]:
        probe, stack = self.members[0], self.stack
        probe.steps.append(stack.optimizer.steps)  # before this exchange's updates
        defenses = stack.members[0].defenses
        counts = [dict(d.applied) for d in defenses]
        fit = torch.softmax(logits[0].detach(), dim=1).gather(1, y[0][:, None])[:, 0]  # (B,)
        probe.residual[self.rows.cpu().numpy()] = (1.0 - fit).double().cpu().numpy()
        soft = next(
            (t for d in stack.stacked_hooks if (t := d.soft_targets(y)) is not None), None
        )  # (1, B, C) or None
        if soft is None:
            label_loss = F.cross_entropy(logits[0], y[0])
        else:
            label_loss = -(soft[0] * torch.log_softmax(logits[0], dim=1)).sum(dim=1).mean()
        objective = stack.objective(logits, y, h_passive).sum()
        total = torch.autograd.grad(objective, h_passive, retain_graph=True)
        label = torch.autograd.grad(label_loss, h_passive, retain_graph=True)
        for d, applied in zip(defenses, counts, strict=True):
            d.applied = applied
        probe.parts = {
            k: (t[0].detach().double().cpu().numpy(), g[0].detach().double().cpu().numpy())
            for k, (t, g) in enumerate(zip(total, label, strict=True))
        }
        return grads


class ExchangeProbe:
    """A hook at the active party that records, at every exchange, the gradient each passive
    party is sent, split into its label part and its defenses' loss-term part.

    Why a hook and not a second model: the split must use exactly the state the gradient
    was computed from (MID's parameters before the Q local updates, the same noise draw).
    Its stacked form (``ProbeForm``) differentiates the label loss and the whole objective
    separately from the exchange's own logits, before any gradient leaves and before the
    active party's local updates; ``on_send`` then files each passive party's parts with
    the gradient as it went out. Training and records are unchanged by it.

    Per passive party (by id), per training row, the last exchange's ``sent`` (what went
    out, after any message hook before this one), ``total`` (d objective / dH, as
    recomputed), ``label`` and ``defense`` = total - label. ``exchanges``: gradients sent.
    """

    stacked = ProbeForm

    def __init__(self, n_rows: int, width: int, passive: list[int]) -> None:
        def zeros() -> dict[int, np.ndarray]:
            return {k: np.zeros((n_rows, width)) for k in passive}

        self.sent, self.total, self.label, self.defense = zeros(), zeros(), zeros(), zeros()
        self.residual = np.zeros(n_rows)  # 1 - p(y) of each row at its last exchange
        self.h_norm = {k: np.zeros(n_rows) for k in passive}  # |H| sent, last exchange
        self.exchanges = 0
        self.parts: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # dst -> (total, label)
        self.steps: list[int] = []  # the active stack's optimizer steps as each exchange sent

    def on_receive(self, party: Any, msg: Message) -> Message:
        if msg.kind == "embedding" and msg.batch is not None:
            rows = party.schedule.rows(msg.batch)
            self.h_norm[msg.src][rows] = np.linalg.norm(np.asarray(msg.payload), axis=1)
        return msg

    def on_send(self, party: Any, msg: Message) -> Message:
        if msg.kind != "gradient" or msg.batch is None:
            return msg
        rows = party.schedule.rows(msg.batch)
        total, label = self.parts.pop(msg.dst)
        self.sent[msg.dst][rows] = np.asarray(msg.payload, dtype=np.float64)
        self.total[msg.dst][rows] = total
        self.label[msg.dst][rows] = label
        self.defense[msg.dst][rows] = total - label
        self.exchanges += 1
        return msg


def norm_scoring(grads: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """NS on per-row gradients (n, C): AUC of ||g_i|| against y (n,) and its advantage,
    scored by the same rules as the judge scores the NS attack."""
    rows = np.arange(len(y))
    guess = LabelGuess(split="train", rows=rows, scores=np.linalg.norm(grads, axis=1))
    score = chance.score_labels(guess, y, y)
    return {"auc": score.ap, "advantage": score.advantage}


# name -> (protocol, its parameters, the passive parties' local steps per gradient where
# they differ from the protocol's Q). ``celu`` is not run by default (``--variants``).
VARIANTS: dict[str, tuple[str, dict[str, Any], int | None]] = {
    "fedsgd": ("fedsgd", {}, None),
    "fedbcd": ("fedbcd", {"q": 5}, None),
    "fedbcd-passive-q1": ("fedbcd", {"q": 5}, 1),
    "fedbcd-active-q1": ("fedbcd", {"q": 1}, 5),
    "celu": ("celu", {"q": 5, "w": 5, "xi": 0.5}, None),
}
DEFAULT_VARIANTS = ("fedsgd", "fedbcd", "fedbcd-passive-q1", "fedbcd-active-q1")


class PassiveQ(Protocol):
    """FedBCD whose passive parties take ``passive_q`` local steps per gradient and the
    active party ``q`` (the variants that tell the two sides' steps apart): the base
    round with the two step counts, a protocol of its own."""

    name = "fedbcd_passive_q"
    defaults: ClassVar[dict[str, Any]] = {"q": 5, "passive_q": 5}

    def exchange(
        self, active: StackedParty, passives: StackedPassives, ref: BatchRef, nxt: BatchRef | None
    ) -> None:
        passives.request(ref)
        active.forward(ref)
        grads = active.passive_gradients(ref, passives.embeddings())
        passives.send(grads, nxt, int(self.params["passive_q"]))
        active.update(int(self.params["q"]))


def spec_of(variant: str, dataset: str, **fields: Any) -> tuple[TrialSpec, int | None]:
    """The spec of ``variant`` and its passive parties' local steps per gradient (None:
    the protocol's own)."""
    protocol, params, passive_steps = VARIANTS[variant]
    spec = TrialSpec.build(dataset=dataset, protocol=protocol, protocol_params=params, **fields)
    return spec, passive_steps


def train_probed(
    spec: TrialSpec, passive_steps: int | None = None
) -> tuple[TrainResult, list[Any], ExchangeProbe, dict[str, Any]]:
    """One in-process training of ``spec`` with the probe at the active party and the NS /
    DS message log at the passive one; ``passive_steps``: the passive parties' local steps
    per gradient where they differ from the protocol's Q. Returns the result, the trained
    parties, the probe and the attacks' scores ({name: {auc, advantage, collapse}})."""
    prepared = prepare_parties(spec, load_dataset(spec.dataset), ATTACKS)
    protocol: Protocol = prepared.protocol
    if passive_steps is not None:
        protocol = PassiveQ(q=protocol.local_steps, passive_q=passive_steps)
    group = LocalGroup([StackedPartyInit((init,)) for init in prepared.inits])  # stacks of one
    active = group.parties[-1].parties[0]
    passive = list(range(len(group.parties) - 1))
    probe = ExchangeProbe(active.X_train.shape[0], active.config.emb_width, passive)
    active.hooks.append(probe)
    group.call_all(StackedParty.stack, [0])
    probe.stacks = group.parties  # type: ignore[attr-defined]  # (tests read their optimizers)
    (result,) = group.train(StackedRounds(protocol, targets=[None], slots=[0]), int(spec.epochs))  # type: ignore[arg-type]
    parties = [stack.parties_of([0])[0] for stack in group.parties]
    attacked = {
        out.name: {
            "auc": out.score.ap,
            "advantage": out.score.advantage,
            "collapse": out.score.collapse,
        }
        for out in run_attacks(parties, ATTACKS, spec.seed)
    }
    return result, parties, probe, attacked


@torch.no_grad()
def mp_without_passive(parties: list[Any]) -> float:
    """Test accuracy with every passive party's test embeddings replaced by the mean of its
    training embeddings: the model as it would be without what the passive parties add."""
    for p in parties:
        p.bottom.eval()
    active = parties[-1]
    active.top.eval()
    means = [
        p.bottom(p.X_train).mean(dim=0, keepdim=True).expand(p.X_test.shape[0], -1)
        for p in parties[:-1]
    ]  # (K-1) x (n_test, C)
    logits = active.top([*means, active.bottom(active.X_test)])
    return float((logits.argmax(dim=1) == active.y_test).double().mean())


@torch.no_grad()
def mid_code(parties: list[Any]) -> dict[str, float] | None:
    """MID's bottleneck on the first passive party's training rows, after training: mean
    |mu| and mean sigma over rows and code units, and the share of the decoder's hidden
    ReLUs that are on at z = mu (None without MID)."""
    active = parties[-1]
    mids = [d for d in active.defenses if d.name == "mid"]
    if not mids:
        return None
    block = mids[0].module.blocks[0]
    h = parties[0].bottom(parties[0].X_train)
    mu, s = block.encoder(h).split(block.code, dim=1)
    sigma = torch.nn.functional.softplus(s - 0.5)
    on = block.decoder[1](block.decoder[0](mu)) > 0  # (n, hidden)
    return {
        "mu": float(mu.abs().mean()),
        "sigma": float(sigma.mean()),
        "decoder_on": float(on.float().mean()),
    }


def one(spec: TrialSpec, passive_steps: int | None = None) -> dict[str, Any]:
    """The measurements of one training (see the module docstring)."""
    start = time.perf_counter()
    result, parties, probe, attacked = train_probed(spec, passive_steps)
    y = parties[-1].y_train.cpu().numpy()
    log = parties[0].log()
    assert log is not None
    received = [m for m in log.received if m.kind == "gradient"]
    grad_norms = np.linalg.norm(probe.sent[0], axis=1)  # (n,) each row's last gradient
    code = mid_code(parties)
    return {
        "mp": result.mp,
        "mp_without_passive": mp_without_passive(parties),
        "ns": attacked["ns"],
        "ds": attacked["ds"],
        "h_norm": float(probe.h_norm[0].mean()),
        "grad_norm": float(grad_norms.mean()),
        "zero_gradients": float((grad_norms == 0).mean()),
        "residual": float(probe.residual.mean()),
        "mid_mu": code["mu"] if code else None,
        "mid_sigma": code["sigma"] if code else None,
        "mid_decoder_on": code["decoder_on"] if code else None,
        "label_part_norm": float(np.linalg.norm(probe.label[0], axis=1).mean()),
        "defense_part_norm": float(np.linalg.norm(probe.defense[0], axis=1).mean()),
        "ns_on_label_part": norm_scoring(probe.label[0], y),
        "ns_on_defense_part": norm_scoring(probe.defense[0], y),
        "rounds": result.rounds,
        "gradients_received": len(received),
        "applied": {c["name"]: c["counts"] for c in parties[-1].defense_applied()},
        "seconds": time.perf_counter() - start,
    }


def mean_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise mean over seeds (nested dicts too; None stays None), with the attacks'
    advantages per seed kept beside it."""

    def avg(values: list[Any]) -> Any:
        if values[0] is None:
            return None
        if isinstance(values[0], dict):
            return {k: avg([v[k] for v in values]) for k in values[0]}
        return float(f"{statistics.mean(float(v) for v in values):.4g}")  # norms are ~1e-6

    out = avg(runs)
    for attack in ("ns", "ds"):
        out[attack]["advantage_by_seed"] = [round(r[attack]["advantage"], 4) for r in runs]
    return out


def measure(
    dataset: str, epochs: int | None, seeds: list[int], variants: list[str], lambdas: list[float]
) -> dict[str, Any]:
    """{variant: {cell: mean over seeds}}; cells: ``mid <lambda>`` and, for the plain
    protocols, ``none``."""
    out: dict[str, Any] = {}
    for variant in variants:
        cells: list[tuple[str, str, float | None]] = [
            (f"mid {lam:g}", "mid", lam) for lam in lambdas
        ]
        if variant in ("fedsgd", "fedbcd"):
            cells.insert(0, ("none", "none", None))
        out[variant] = {}
        for label, defense, strength in cells:
            runs = []
            for seed in seeds:
                cell = {"defense": defense, "defense_param": strength, "seed": seed}
                spec, passive_steps = spec_of(variant, dataset, epochs=epochs, **cell)
                runs.append(one(spec, passive_steps))
            out[variant][label] = mean_of(runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--epochs", type=int, default=None, help="default: VFLAIR's (adult: 50)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 0.01])
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    spec = TrialSpec.build(dataset=args.dataset, epochs=args.epochs)
    print(
        json.dumps(
            {
                "benchmark": "fedbcd_defenses",
                "dataset": args.dataset,
                "epochs": spec.epochs,
                "batch_size": spec.batch_size,
                "seeds": args.seeds,
                "partition": "agg",
                "variants": {v: VARIANTS[v] for v in variants},
                "results": measure(args.dataset, args.epochs, args.seeds, variants, args.lambdas),
            }
        )
    )


if __name__ == "__main__":
    main()
