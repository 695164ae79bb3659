"""FedBCD (Liu et al.): Q local updates per exchange, reusing the last received values.

Passive parties take Q steps with the stale gradient dL/dH_k (recomputing H_k each time);
the active party takes Q steps with the stale passive embeddings. VFLAIR uses Q = 5.
"""

from __future__ import annotations

from typing import ClassVar

from trainables.errors import ConfigError
from trainables.protocols.base import Protocol, Value


class FedBCD(Protocol):
    name = "fedbcd"
    defaults: ClassVar[dict[str, Value]] = {"q": 5}

    def validate(self) -> None:
        q = self.params["q"]
        if not isinstance(q, int) or isinstance(q, bool) or q < 1:
            raise ConfigError(f"protocol 'fedbcd': q={q!r} must be an integer >= 1")

    @property
    def local_steps(self) -> int:
        return int(self.params["q"])
