"""Errors a user can fix. The CLIs turn them into exit code 2 with the message as-is."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class ConfigError(ValueError):
    """Bad input: the message names the key, the bad value and what is allowed (or the path)."""


class MissingDataError(ConfigError):
    """A dataset file that a loader needs is not where it looked; the message names the path.

    ``dataset`` and ``file`` (the file's path relative to a data directory, where known) say
    what is missing to code that decides on it, e.g. the test suite, which turns a missing
    shared dataset into a skip (``tests/conftest.py``) without parsing the message.
    """

    def __init__(self, message: str, *, dataset: str | None = None, file: str | None = None):
        super().__init__(message)
        self.dataset = dataset
        self.file = file


def did_you_mean(value: object, allowed: Iterable[object]) -> str:
    """``"did you mean 'gdp'? "`` for the allowed names closest to a misspelled ``value``, or
    ``""`` when none is close; it goes just before a message's ``allowed:``/``known:`` list.

    Why: a list of twenty names hides the one meant; ``gpd`` next to ``gdp`` does not.
    Case is ignored (``MNIST`` suggests ``mnist``); only string values get suggestions.
    """
    if not isinstance(value, str) or not value:
        return ""
    names = {str(a).lower(): str(a) for a in allowed if str(a) != value}
    close = difflib.get_close_matches(value.lower(), list(names), n=3, cutoff=0.6)
    if not close:
        return ""
    return "did you mean " + " or ".join(repr(names[c]) for c in close) + "? "


def refuse_unknown(what: str, params: Iterable[str], allowed: Sequence[str]) -> None:
    """ConfigError naming the parameters of ``what`` (``"defense 'gdp'"``) that are not in
    ``allowed``, with the closest allowed name when exactly one is unknown (a typo).

    Why one function: every attack, defense, protocol and codec refuses unknown parameters
    the same way, so the message and its suggestion are written once."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        hint = did_you_mean(unknown[0], allowed) if len(unknown) == 1 else ""
        raise ConfigError(
            f"{what}: unknown parameter(s) {unknown}; {hint}allowed: {', '.join(allowed) or 'none'}"
        )
