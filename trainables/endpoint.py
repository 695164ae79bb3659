"""The endpoint every party role is: a message hook chain and what it reports.

Why one base: a party of any kind (NN ``Party``, FedCVT's ``CvtParty``, FedHSSL's
``SSLParty``) sends and receives ``Message``s through the same middleware — a message log
for attacks that read messages, training-time attacks, defenses, codecs — and the trial
reads the same reports back (``defense_applied``). Written once here, the attach order
cannot drift between kinds: the log first, so on the way out it keeps what the party
itself computed and on the way in what reached it after every hook (a party's own view,
what an attacker there sees); then training-time attacks; then the hook chain in its
order (defenses, then codecs, so the sender encodes last and the receiver decodes first).
"""

from __future__ import annotations

from typing import Any
from typing import Protocol as TypingProtocol

from trainables.attacks import ATTACKS
from trainables.codecs import CODECS
from trainables.defenses import DEFENSES
from trainables.defenses.applied import party_reports
from trainables.errors import ConfigError
from trainables.hooks import MessageLog
from trainables.messages import Message


class MessageHook(TypingProtocol):
    """Middleware on a party's messages (defenses, attack recorders). Stack in a list."""

    def on_send(self, party: Any, msg: Message) -> Message: ...

    def on_receive(self, party: Any, msg: Message) -> Message: ...


def hook_registry(family: str) -> Any:
    """The registry of a hook family (what ``PartyInit.hooks`` names by family)."""
    if family == "defense":
        return DEFENSES
    if family == "codec":
        return CODECS
    raise ConfigError(f"hook family {family!r} is not one of: defense, codec")


class Endpoint:
    """Base of every party role: ``hooks`` (the stack, in order), ``attach`` (what the
    trial asked for, from an init with ``record``, ``install`` and ``hooks``), ``send_out``
    / ``receive_in`` (a message through the stack), ``defense_applied`` and ``log``."""

    hooks: list[MessageHook]

    def __init__(self) -> None:
        self.hooks = []

    def attach(self, init: Any) -> None:
        """What the trial asked of this party (an init with ``record``, ``install`` and
        ``hooks``): a message log, training-time attacks, then the hook chain in order."""
        if init.record:
            self.hooks.append(MessageLog())
        for name, params, aux in init.install:
            ATTACKS.create(name, **params).install(self, aux)
        for family, name, params in init.hooks:
            hook_registry(family).create(name, **params).attach(self)

    def send_out(self, msg: Message) -> Message:
        """``msg`` through the hook chain on the way out (list order)."""
        for hook in self.hooks:
            msg = hook.on_send(self, msg)
        return msg

    def receive_in(self, msg: Message) -> Message:
        """``msg`` through the hook chain on the way in (reverse order: middleware)."""
        for hook in reversed(self.hooks):
            msg = hook.on_receive(self, msg)
        return msg

    def defense_applied(self) -> list[dict[str, Any]]:
        """How often each defense at this party changed something (plain data: an actor
        sends it back; ``trainables.defenses.applied`` merges and checks it)."""
        return party_reports(self.hooks)

    def log(self) -> MessageLog | None:
        """The message log, when the trial asked this party to keep one."""
        return next((h for h in self.hooks if isinstance(h, MessageLog)), None)
