"""Training protocols, by name. A new protocol is one file plus one ``register`` line here.

Per-party hooks a protocol asks for (``Protocol.codec_hooks``) are built from ``CODECS``:
the compression codecs and CELU-VFL's workset.
"""

from trainables.codecs import CODECS
from trainables.protocols.base import PROTOCOLS, Protocol, TrainResult
from trainables.protocols.celu import CELU, CeluWorkset
from trainables.protocols.compressed import Quantize, TopK
from trainables.protocols.fedbcd import FedBCD
from trainables.protocols.fedsgd import FedSGD

PROTOCOLS.register("fedsgd", FedSGD)
PROTOCOLS.register("fedbcd", FedBCD)
PROTOCOLS.register("celu", CELU)
PROTOCOLS.register("quantize", Quantize)
PROTOCOLS.register("topk", TopK)
CODECS.register("celu_workset", CeluWorkset)

__all__ = [
    "CELU",
    "CODECS",
    "PROTOCOLS",
    "FedBCD",
    "FedSGD",
    "Protocol",
    "Quantize",
    "TopK",
    "TrainResult",
]
