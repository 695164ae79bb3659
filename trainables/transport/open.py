"""``open_parties``: the one door from a trial to its parties, local or on Ray.

Why its own module: it is the only code that chooses between the two groups, and the
``ray`` side (``ray_actors/``) sits above the protocols it runs, so the chooser sits above
both and is imported by the trials and kinds, never by the protocols.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from trainables.transport.group import LocalGroup, PartyGroup
from trainables.transport.placement import Placement


@contextmanager
def open_parties(inits: Sequence[Any], placement: Placement) -> Iterator[PartyGroup]:
    """The parties built from ``inits`` (anything with ``build()``), closed on exit: in
    this process, or one Ray actor each (``ray_actors/``, imported only then)."""
    if not placement.remote:
        yield LocalGroup(inits)
        return
    from trainables.transport.ray_actors import open_ray_group

    with open_ray_group(inits, placement) as group:
        yield group
