"""In-process transport: the passive parties are plain objects in this process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainables.transport.base import Transport


class LocalTransport(Transport):
    """Runs each call at submit time; used by tests and tiny trials."""

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[object]:
        return [getattr(p, method)(*a) for p, a in zip(self.peers, args, strict=True)]

    def _gather(self, handles: list[object]) -> list[Any]:
        return handles
