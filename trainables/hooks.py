"""Message hooks: middleware on what a party sends and receives.

Defenses (noise, sparsification, ...) and attack recorders plug in here without touching
the party or the protocol. A party applies its hooks in list order on ``on_send`` and in
reverse order on ``on_receive``, like a middleware stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.roles import HookHost


@dataclass
class MessageLog:
    """Keeps every message its party sent or received: the raw material of a PartyView."""

    sent: list[Message] = field(default_factory=list)
    received: list[Message] = field(default_factory=list)

    def on_send(self, party: HookHost, msg: Message) -> Message:
        self.sent.append(msg)
        return msg

    def on_receive(self, party: HookHost, msg: Message) -> Message:
        self.received.append(msg)
        return msg
