"""Contrast rows whose arm is no baseline for what the row measures, named.

Why: under ``ssl_variant: splitnn`` nothing is pretrained, so ``mc_pretrained`` (model
completion on the encoder as it stands before fine-tuning) attacks an *untrained* encoder.
``--compare ssl_variant=splitnn:hssl_simsiam`` then reads "FedHSSL leaks more", which is
what any SSL gives an attacker, federated or not: with ``local_simsiam`` (the party's own
SSL, the adversary's prior) as the reference the difference vanished in the issue's run
(+0.027 [−0.092, +0.147] against +0.142 [0.078, 0.205]). Such rows keep their numbers and
get the reason in the ``not_a_baseline`` column, a mark on screen and a note that says
which reference to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.compare import Compare, arm_of


@dataclass(frozen=True)
class Rule:
    axis: str
    level: str  # the level that is no baseline for the metric
    metric_prefix: str  # the attack labels it concerns (``mc_pretrained``, ``mc_pretrained@x``)
    why: str


RULES: tuple[Rule, ...] = (
    Rule(
        "ssl_variant",
        "splitnn",
        "mc_pretrained",
        "splitnn pretrains nothing, so mc_pretrained attacks an untrained encoder there: the "
        "difference is what SSL itself gives the attacker, not what federation adds; the "
        "adversary's own prior is local SSL (--compare ssl_variant=local_simsiam:*)",
    ),
)


def not_a_baseline(
    table: pd.DataFrame, compare: Compare, cap_attacks: list[str] | None = None
) -> pd.Series:
    """Per contrast row: the reason its comparison is no baseline for its metric, or "".
    A CAP row (``cap``) averages ``cap_attacks``: it is flagged when one of them is."""
    out = pd.Series([""] * len(table), index=table.index, dtype=object)
    for rule in RULES:
        if compare.axis != rule.axis:
            continue
        probe = Compare(rule.axis, rule.level, "\0")
        if arm_of(compare.a, probe) != "a" and arm_of(compare.b, probe) != "a":
            continue
        hit = table["metric"].astype(str).str.startswith(rule.metric_prefix)
        if any(a.startswith(rule.metric_prefix) for a in cap_attacks or ()):
            hit |= table["metric"].astype(str) == "cap"
        out[hit] = rule.why
    return out
