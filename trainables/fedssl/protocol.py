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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainables.fedssl.agents import Agent, Server, SupportAgent
from trainables.messages import Message
from trainables.rounds import Rounds, TrainResult
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


def _send(tr: Transport, msgs: Sequence[tuple[object, ...]], new_round: bool) -> list[Message]:
    return tr.gather(tr.submit(Agent.local_round, msgs, training=True, new_round=new_round))


class FedSSLRounds(Rounds[PartyGroup, None]):
    """``plan.rounds`` communication rounds on ``Rounds.run``'s loop, driven from the
    trial's process; one epoch is one round, and every round's global model is scored by
    ``score`` (the curve is ``acc_by_round``).

    Returns a ``TrainResult`` whose ``outputs`` hold ``acc_by_round``, the server's
    ``privacy`` accounting and each agent's labeled-data ``access`` log."""

    def __init__(self, plan: RoundPlan, score: Callable[[Message], float]) -> None:
        self.plan, self.score = plan, score

    def setup(self, group: PartyGroup, transport: None) -> None:
        plan = self.plan
        self.agents = (*plan.support, *plan.query)
        self.wires = {"all": group.transport(self.agents)}
        if plan.warmup and plan.query and not plan.private:
            self.wires["support"] = group.transport(list(plan.support))
        if plan.private:
            self.wires |= {f"s{k}": group.transport([k]) for k in plan.support}
            self.wires["query"] = group.transport(plan.query)
        self.blocks = (
            {k: group.call(k, SupportAgent.dp_block) for k in plan.support} if plan.private else {}
        )
        self.msg: Message = group.call(plan.server, Server.global_message)

    def epoch_steps(self, group: PartyGroup, epoch: int) -> Sequence[int]:
        return [epoch]  # round t = epoch t

    def exchange(self, group: PartyGroup, transport: None, t: int, nxt: int | None) -> None:
        """Round t: the global vector down, local steps, vectors up, FedAvg at the server."""
        plan = self.plan
        if plan.private:
            ups, weights = _private_round(group, plan, self.wires, self.blocks, self.msg, t)
        else:
            now = plan.support if t < plan.warmup else self.agents
            wire = self.wires["support"] if t < plan.warmup else self.wires["all"]
            ups = _send(wire, [(self.msg, t)] * len(now), new_round=True)
            weights = [_weight(plan, k, t) for k in now]
        group.call(plan.server, Server.aggregate, ups, weights)
        self.msg = group.call(plan.server, Server.global_message)

    def pauses(self) -> bool:
        return True  # every round's global model is scored

    def evaluate(self, group: PartyGroup, transport: None) -> float:
        return self.score(self.msg)

    def result(self, group: PartyGroup, transport: None, seconds: float, total: int) -> TrainResult:
        if total:
            self.point(self.evaluate(group, transport), total, last=True)
        stats = [w.stats for w in self.wires.values()]
        return TrainResult(
            mp=self.curve[-1] if self.curve else float("nan"),
            rounds=sum(s.rounds for s in stats),
            comm_bytes=sum(s.comm_bytes for s in stats),
            train_seconds=seconds,
            rounds_to_target=self.reached,
            outputs={
                "acc_by_round": self.curve,
                "privacy": group.call(self.plan.server, Server.privacy),
                "access": group.call_many(
                    [(k, Agent.access_log, ()) for k in range(self.plan.server)]
                ),
            },
        )


def run_rounds(
    group: PartyGroup, plan: RoundPlan, score: Callable[[Message], float]
) -> TrainResult:
    """Train ``plan.rounds`` communication rounds; ``score`` scores each global model
    (``rounds_to_target``: the first round, 1-based, whose model reached ``plan.target_mp``)."""
    return FedSSLRounds(plan, score).run(group, None, plan.rounds, plan.target_mp)


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
        if not group.call(plan.server, Server.admit, *blocks[k], t):
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
