"""Counts in words: ``1 pack``, ``2 packs``, ``1 study``, ``3 studies``; and durations.

Why a helper: "1 packs" and "training(s)" read as a program talking to itself; every line
the sweep prints with a count goes through ``plural``.
"""

from __future__ import annotations

_IRREGULAR = {"study": "studies", "entry": "entries", "process": "processes"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` in the number ``n`` asks for: ``plural(1, "pack") == "1 pack"``,
    ``plural(0, "pack") == "0 packs"``; ``many`` for a plural that is not ``word + s``."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {many or _IRREGULAR.get(word, word + 's')}"


def duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``: as precise as a person reading a progress line needs."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"
