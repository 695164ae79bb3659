"""Compressed exchange (Castiglia et al., C-VFL): FedSGD with a codec on every party.

``quantize`` sends b-bit codes of the embeddings, ``topk`` each sample's k largest
entries; both count bytes at the encoded size (see codecs.py). Gradients go dense unless
``gradients=1``, as in C-VFL and VFLAIR, so the embedding bytes per round fall to about
b/32 (quantize) while the gradient bytes stay. The parameters are validated by the codec
itself, so a bad value fails when the spec is checked, before any party is built.
"""

from __future__ import annotations

from typing import ClassVar

from trainables.codecs import CODECS
from trainables.protocols.base import HookEntry, Protocol, Value


class CompressedFedSGD(Protocol):
    """FedSGD whose messages go through the codec named ``codec``."""

    codec: ClassVar[str] = ""

    def validate(self) -> None:
        CODECS.create(self.codec, **self.params)  # raises ConfigError on bad values

    def codec_hooks(self) -> tuple[HookEntry, ...]:
        return (("codec", self.codec, dict(self.params)),)


class Quantize(CompressedFedSGD):
    name = "quantize"
    codec = "quantize"
    defaults: ClassVar[dict[str, Value]] = {"bits": 16, "gradients": 0}


class TopK(CompressedFedSGD):
    name = "topk"
    codec = "topk"
    defaults: ClassVar[dict[str, Value]] = {"ratio": 0.9, "gradients": 0}
