"""Training protocols, by name. A new protocol is one file plus one ``register`` line here."""

from trainables.protocols.base import PROTOCOLS, Protocol, TrainResult
from trainables.protocols.fedbcd import FedBCD
from trainables.protocols.fedsgd import FedSGD

PROTOCOLS.register("fedsgd", FedSGD)
PROTOCOLS.register("fedbcd", FedBCD)

__all__ = ["PROTOCOLS", "FedBCD", "FedSGD", "Protocol", "TrainResult"]
