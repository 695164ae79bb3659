"""Tune's count of callbacks for Ray's usage statistics, skipped while those are off.

Why: every ``ray.tune`` run calls ``ray.air._internal.usage.tag_callbacks``; to count
the callbacks by class it imports the MLflow, Weights & Biases, Comet and Aim
integrations, and the first imports ``mlflow``: 0.7 CPU-s in the driver right before the
first trial starts, with ``--no-mlflow`` too (``python -X importtime sweep.py --space
smoke.yaml``, 2026-12-07). The count only feeds Ray's usage report, which the engine turns
off (``RAY_USAGE_STATS_ENABLED=0``, set in ``runner.py`` unless the user set it); a user
who turns the report on gets Tune's count as before. A Ray without this function is left
as it is.
"""

from __future__ import annotations

from typing import Any

_MARK = "_vflsweep_skips_callback_count"


def install() -> bool:
    """Skip the count while usage statistics are off; True when it is skipped."""
    try:
        from ray._common.usage.usage_lib import usage_stats_enabled
        from ray.air._internal import usage
    except ImportError:
        return False
    if usage_stats_enabled() or not hasattr(usage, "tag_callbacks"):
        return False
    if getattr(usage.tag_callbacks, _MARK, False):
        return True

    def tag_callbacks(callbacks: Any) -> bool:
        """Nothing recorded: usage statistics are off."""
        return False

    setattr(tag_callbacks, _MARK, True)
    usage.tag_callbacks = tag_callbacks
    return True
