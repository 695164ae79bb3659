"""The round protocol: the driver moves model vectors between the server and the agents.

Why a driver here: every model vector an agent receives or returns crosses a ``Transport``
from this process (``group.transport``), so rounds and bytes are counted where they cross,
on either transport; the server (FedAvg, privacy ledger) and the agents are parties of the
same group and only ever see model vectors.

Per round t (Alg. 1): the server's global vector goes down to every participating agent,
each runs its local steps, the vectors come up and the server averages them. FedSSL-DP
(Alg. 2): support agents run one after another on the chained vector, each only if the
server's ledger admits its DP block; the query agents then start in parallel from the
chain's result; FedAvg over the chain's vector and the query agents' vectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainables.messages import Message
from trainables.protocols.base import TrainResult
from trainables.transport.base import Transport
from trainables.transport.group import PartyGroup


@dataclass(frozen=True)
class RoundPlan:
    """Who trains, for how many rounds, with which FedAvg weights (party -> weight)."""

    rounds: int
    support: tuple[int, ...]
    query: tuple[int, ...]  # empty for the supervised baseline
    server: int
    weights: dict[int, float]
    private: bool  # FedSSL-DP's sequential, budgeted support phase
    rampup: int = 0  # query agents' weight x min(1, t / rampup) (MixMatch's ramp-up)
    warmup: int = 0  # rounds t < warmup train the support agents only
    target_mp: float | None = None


def rounds_to(acc_by_round: Sequence[float], target: float | None) -> int | None:
    """The first round (1-based) whose global model reached ``target`` accuracy."""
    if target is None:
        return None
    hits = [t + 1 for t, acc in enumerate(acc_by_round) if acc >= target]
    return hits[0] if hits else None


def _send(tr: Transport, msgs: Sequence[tuple[Any, ...]], new_round: bool) -> list[Message]:
    return tr.gather(tr.submit("local_round", msgs, training=True, new_round=new_round))


def run_rounds(
    group: PartyGroup, plan: RoundPlan, evaluate: Callable[[Message], float]
) -> TrainResult:
    """Train ``plan.rounds`` communication rounds; ``evaluate`` scores each global model.

    ``outputs``: ``acc_by_round``, the server's ``privacy`` accounting and each agent's
    labeled-data ``access`` log."""
    agents = (*plan.support, *plan.query)
    wires = {"all": group.transport(agents)}
    if plan.warmup and plan.query and not plan.private:
        wires["support"] = group.transport(list(plan.support))
    if plan.private:
        wires |= {f"s{k}": group.transport([k]) for k in plan.support}
        wires["query"] = group.transport(plan.query)
    blocks = {k: group.call(k, "dp_block") for k in plan.support} if plan.private else {}
    accs: list[float] = []
    start = time.perf_counter()
    msg = group.call(plan.server, "global_message")
    for t in range(plan.rounds):
        if plan.private:
            ups, weights = _private_round(group, plan, wires, blocks, msg, t)
        else:
            now = plan.support if t < plan.warmup else agents
            wire = wires["support"] if t < plan.warmup else wires["all"]
            ups = _send(wire, [(msg, t)] * len(now), new_round=True)
            weights = [_weight(plan, k, t) for k in now]
        group.call(plan.server, "aggregate", ups, weights)
        msg = group.call(plan.server, "global_message")
        accs.append(evaluate(msg))
    seconds = time.perf_counter() - start
    stats = [w.stats for w in wires.values()]
    return TrainResult(
        mp=accs[-1] if accs else float("nan"),
        rounds=sum(s.rounds for s in stats),
        comm_bytes=sum(s.comm_bytes for s in stats),
        train_seconds=seconds,
        outputs={
            "acc_by_round": accs,
            "privacy": group.call(plan.server, "privacy"),
            "access": group.call_many([(k, "access_log", ()) for k in range(plan.server)]),
        },
    )


def _weight(plan: RoundPlan, k: int, t: int) -> float:
    """FedAvg weight of agent k in round t: query agents ramp up linearly over
    ``plan.rampup`` rounds (Adam ignores a loss weight, so MixMatch's ramp of the
    unlabeled loss becomes a ramp of the unlabeled agents' share of the average)."""
    t = t - plan.warmup  # the ramp starts when the query agents join
    ramp = 1.0 if k in plan.support or plan.rampup == 0 else min(1.0, t / plan.rampup)
    return plan.weights[k] * ramp


def _private_round(
    group: PartyGroup, plan: RoundPlan, wires: dict[str, Transport],
    blocks: dict[int, tuple[float, float, int]], msg: Message, t: int,
) -> tuple[list[Message], list[float]]:  # fmt: skip
    """Alg. 2: support agents in sequence while the ledger admits them, then the queries."""
    current, new_round, chain_weight = msg, True, 0.0
    for k in plan.support:
        if not group.call(plan.server, "admit", *blocks[k], t):
            break  # out of budget: no labeled access from here on (the ledger remembers)
        current = _send(wires[f"s{k}"], [(current, t, True)], new_round)[0]
        new_round, chain_weight = False, chain_weight + plan.weights[k]
    if t < plan.warmup:  # support agents only this round
        return ([current], [1.0]) if chain_weight > 0 else ([msg], [1.0])
    ups = _send(wires["query"], [(current, t)] * len(plan.query), new_round)
    weights = [_weight(plan, k, t) for k in plan.query]
    if chain_weight > 0:
        ups, weights = [current, *ups], [chain_weight, *weights]
    return ups, weights
