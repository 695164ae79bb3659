"""What crosses a party boundary, and the batch schedule every party derives by itself.

Why numpy payloads: a message must look the same whichever transport moves it and
whatever device produced it, and its size as sent must be known (bytes are counted at the
transport). Codecs that compress a payload set ``nbytes`` to the encoded size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


class BatchRef(NamedTuple):
    """Which rows a round is about: parties agree on the schedule, so only this travels.

    A NamedTuple, not a dataclass: it crosses a process boundary every round and a tuple
    pickles in a fraction of the time.
    """

    epoch: int
    index: int  # type: ignore[assignment]  # a NamedTuple field that shadows tuple.index


@dataclass(frozen=True)
class Message:
    """One payload from ``src`` to ``dst``: embeddings up, gradients down, SSL views sideways."""

    kind: str  # "embedding" | "gradient" | "test_embedding" | ...
    src: int
    dst: int
    payload: Any  # np.ndarray unless a codec encoded it
    nbytes: int  # size as sent (the encoded size for compressed payloads)
    batch: BatchRef | None = None

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # compact pickling: a flat tuple is ~0.2 ms cheaper per Ray call than a dataclass
        b = self.batch
        flat = (self.kind, self.src, self.dst, self.payload, self.nbytes)
        return _rebuild, (*flat, None if b is None else tuple(b))

    @classmethod
    def of(
        cls, kind: str, src: int, dst: int, array: np.ndarray, batch: BatchRef | None = None
    ) -> Message:
        array = np.ascontiguousarray(array)
        return cls(
            kind=kind, src=src, dst=dst, payload=array, nbytes=int(array.nbytes), batch=batch
        )


def _rebuild(
    kind: str, src: int, dst: int, payload: Any, nbytes: int, batch: tuple[int, int] | None
) -> Message:
    ref = None if batch is None else BatchRef(*batch)
    return Message(kind=kind, src=src, dst=dst, payload=payload, nbytes=nbytes, batch=ref)


class BatchSchedule:
    """The shuffled mini-batches of every epoch, derived from the trial seed alone.

    All parties build the same schedule over the same aligned training rows, so a round
    needs to name only (epoch, index), never the sample ids.
    """

    def __init__(self, n_rows: int, batch_size: int, seed: int, shuffle: bool = True) -> None:
        self.n_rows = n_rows
        self.batch_size = min(batch_size, n_rows)
        self.seed = seed
        self.shuffle = shuffle  # False: every epoch's batches in row order (VFLAIR's)
        self._epoch: int | None = None
        self._batches: list[np.ndarray] = []

    def n_batches(self) -> int:
        return -(-self.n_rows // self.batch_size)

    def refs(self, epoch: int) -> list[BatchRef]:
        return [BatchRef(epoch, i) for i in range(self.n_batches())]

    def rows(self, ref: BatchRef) -> np.ndarray:
        """(B,) int64 row positions of ``ref`` within the aligned training rows."""
        if self._epoch != ref.epoch:
            perm = (
                np.random.default_rng([self.seed, ref.epoch]).permutation(self.n_rows)
                if self.shuffle
                else np.arange(self.n_rows)
            )
            self._batches = np.array_split(perm, self.n_batches())
            self._epoch = ref.epoch
        return self._batches[ref.index]
