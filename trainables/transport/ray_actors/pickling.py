"""``pack``: one in-band pickle for a call between party actors (torch-free, so that
``actor.py`` stays light; ``wire.py`` and ``actor.py`` both use it)."""

from __future__ import annotations

import pickle

import ray


def pack(value: object) -> bytes:
    """``value`` as one in-band pickle (cloudpickle for what plain pickle refuses).

    Why: a round's messages are small (one batch of embeddings or gradients); as one
    bytes object a call costs ~0.2 ms less CPU than the same Message through Ray's
    serializer, which sets up an out-of-band buffer for every numpy payload.
    """
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):  # a lambda, a local class
        data: bytes = ray.cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return data
