"""What a message hook may read of the party it is attached to: a structural type.

Why a protocol and not ``trainables.party.Party``: the party module builds its hook chain
from the defense and codec registries (``endpoint.py``), so a hook module naming the party
class, even for type checking only, would tie the two into one import cycle. Hooks run on
every kind's parties (NN ``Party``, FedCVT's ``CvtParty``, FedHSSL's ``SSLParty``); each
has what this says.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class HookHost(Protocol):
    """A party as its hooks see it: its stack, its configuration and its device."""

    hooks: list[Any]  # the party's hook chain, in order (a hook joins it in ``attach``)
    config: Any  # the party's configuration (``PartyConfig`` for NN parties)
    device: torch.device


class NNHost(HookHost, Protocol):
    """An NN party: it also has its batch schedule (GS keeps residuals per training row)."""

    schedule: Any  # the ``BatchSchedule``: which training rows each batch holds


class ActiveHost(NNHost, Protocol):
    """The NN active party as a defense with model hooks sees it (MID, CAE)."""

    top: Any  # the ``DefendedTop``: transforms before the top, a decoder after it
    defenses: list[Any]
