"""One FedSSL trial: rows to agents, parties opened, rounds run, one record out.

Why the experimenter evaluates: no party holds the test rows (the server holds no rows at
all), so ``mp`` is the accuracy of the server's global F on the dataset's test split,
scored in the driver from the vector the server publishes after each round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from trainables.data import Dataset
from trainables.fedssl.agents import AgentConfig, QueryInit, ServerInit, SupportInit
from trainables.fedssl.data import pixel_scale, split_rows
from trainables.fedssl.dp import merged
from trainables.fedssl.models import Classifier, build_models, flatten, load_flat
from trainables.fedssl.options import GENERATIVE, FedSSLOptions, options_of
from trainables.fedssl.protocol import RoundPlan, run_rounds
from trainables.messages import Message
from trainables.records import Record
from trainables.rounds import TrainResult
from trainables.spec import TrialSpec
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement

PartyInits = tuple[SupportInit | QueryInit | ServerInit, ...]


@dataclass(frozen=True)
class Prepared:
    inits: PartyInits  # support agents, query agents, the server (last)
    plan: RoundPlan
    opts: FedSSLOptions


def prepare(spec: TrialSpec, ds: Dataset) -> Prepared:
    """Deal rows, build every party's init and the round plan (ConfigError if impossible)."""
    opts = options_of(spec)
    n_labeled = int(spec.required("n_labeled"))
    rows = split_rows(ds.y_train, n_labeled, opts, spec.seed)
    x = ds.X_train / pixel_scale(ds)  # (n, d) in [0, 1]
    server = opts.n_agents
    config = AgentConfig(
        variant=spec.ssl_variant, opts=opts, d=ds.X_train.shape[1], n_classes=ds.n_classes,
        image_shape=ds.image_shape, lr=float(spec.required("lr")), optimizer=spec.optimizer,
        batch_size=int(spec.required("batch_size")), seed=spec.seed, server_id=server,
    )  # fmt: skip
    support = [SupportInit(i, x[r], ds.y_train[r], config) for i, r in enumerate(rows.support)]
    query = [
        QueryInit(opts.n_support + j, x[r], config) for j, r in enumerate(rows.query)
    ]  # fmt: skip
    budget = opts.epsilon if spec.ssl_variant == "fedssl_dp" else None
    hub = ServerInit(server, initial_vector(config), budget, opts.delta)
    inits: PartyInits = (*support, *query, hub)
    sizes = [len(r) for r in (*rows.support, *rows.query)]
    weights = {k: float(n) if opts.fedavg == "rows" else 1.0 for k, n in enumerate(sizes)}
    queries = tuple(range(opts.n_support, server))  # the supervised baseline leaves them idle
    plan = RoundPlan(
        rounds=int(spec.required("epochs")),
        support=tuple(range(opts.n_support)),
        query=() if spec.ssl_variant == "fedssl_supervised" else queries,
        server=server, weights=weights, private=spec.ssl_variant == "fedssl_dp",
        target_mp=spec.target_mp, rampup=opts.rampup, warmup=opts.warmup,
    )  # fmt: skip
    return Prepared(inits, plan, opts)


def initial_vector(config: AgentConfig) -> np.ndarray:
    """The seeded initial F (, D, G), flattened; the global RNG is left as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        generative = config.variant in GENERATIVE
        return flatten(build_models(config.d, config.n_classes, config.opts.z_dim, generative))


class Evaluator:
    """Test accuracy of the F part of a global model vector (F comes first in it)."""

    def __init__(self, ds: Dataset) -> None:
        with torch.random.fork_rng():  # weights are overwritten; leave the global RNG alone
            self.f = Classifier(ds.X_train.shape[1], ds.n_classes)
        self.n_f = sum(p.numel() for p in self.f.parameters())
        self.x = torch.from_numpy(np.asarray(ds.X_test / pixel_scale(ds), dtype=np.float32))
        self.y = torch.from_numpy(np.array(ds.y_test, dtype=np.int64))  # a writable copy

    def __call__(self, msg: Message) -> float:
        load_flat({"F": self.f}, np.asarray(msg.payload)[: self.n_f])
        with torch.no_grad():
            return float((self.f(self.x).argmax(dim=1) == self.y).float().mean())


def run_fedssl(spec: TrialSpec, ds: Dataset, placement: Placement) -> list[Record]:
    """Train one FedSSL variant and return its clean record."""
    prepared = prepare(spec, ds)
    with open_parties(prepared.inits, placement) as group:
        result = run_rounds(group, prepared.plan, Evaluator(ds))
    return [record_of(spec, prepared, result, ds.y_test)]


def record_of(
    spec: TrialSpec, prepared: Prepared, result: TrainResult, y_test: np.ndarray | None = None
) -> Record:
    """The clean record: final accuracy, counted rounds and bytes, ε where DP ran;
    ``y_test`` (n_test,): the rows that accuracy is over, for its sampling error."""
    extra, epsilon = extra_of(spec, prepared, result)
    return Record.trained(
        spec,
        int(spec.required("n_labeled")),
        result,
        y_test=y_test,
        epsilon=epsilon,
        extra=json.dumps(extra, sort_keys=True),
    )


def extra_of(
    spec: TrialSpec, prepared: Prepared, result: TrainResult
) -> tuple[dict[str, object], float | None]:
    """The record's ``extra`` (agents, rows, accuracy per round, privacy) and its ε."""
    opts, inits = prepared.opts, prepared.inits
    privacy, access = result.outputs["privacy"], result.outputs["access"]
    extra: dict[str, object] = {
        "n_support": opts.n_support,
        "n_query": opts.n_query,
        "split": opts.split,
        "fedavg": opts.fedavg,
        "local_steps": opts.local_steps,
        "threshold": opts.threshold,
        "warmup": opts.warmup,
        "mix_input": opts.mix_input,
        "support_ce": opts.support_ce,
        "rampup": opts.rampup,
        "rows_support": [len(i.x) for i in inits if isinstance(i, SupportInit)],
        "rows_query": [len(i.x) for i in inits if isinstance(i, QueryInit)],
        "acc_by_round": [round(a, 4) for a in result.outputs["acc_by_round"]],
        "labeled_access_rounds": sorted({t for a in access[: opts.n_support] for t in a["rounds"]}),
    }
    if not privacy:
        return extra, None
    history = [tuple(h) for h in privacy["history"]]
    epsilon = float(privacy["epsilon_spent"])
    extra |= {
        "epsilon_budget": opts.epsilon,
        "epsilon_spent": epsilon,
        "delta": opts.delta,
        "noise_multiplier": opts.noise_multiplier,
        "max_grad_norm": opts.max_grad_norm,
        "dp_steps": [list(h) for h in merged(history)],
        "dp_steps_taken": sum(a["dp_steps"] for a in access[: opts.n_support]),
        "dp_stop_round": privacy["stopped_at"],
    }
    return extra, epsilon
