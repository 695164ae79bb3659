"""Errors a user can fix. The CLIs turn them into exit code 2 with the message as-is."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad input: the message names the key, the bad value and what is allowed (or the path)."""


class MissingDataError(ConfigError):
    """A dataset file that a loader needs is not where it looked; the message names the path."""
