"""Transports move messages between the active party and the passive parties.

``local`` calls parties in this process; ``ray`` calls each party in its own Ray actor.
The protocol code is the same for both: it ``submit``s a method call to every passive
party, may compute meanwhile, and ``gather``s the results. Rounds and bytes are counted
here, at the boundary, from the messages that actually cross it.
"""

from trainables.transport.base import Pending, Transport
from trainables.transport.local import LocalTransport

__all__ = ["LocalTransport", "Pending", "Transport"]
