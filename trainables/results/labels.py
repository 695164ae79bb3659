"""Attack labels in records, as readers see them: an adaptive attacker's record is labelled
``<label>@adapted`` (``pmc@adapted``; with a preset, ``tbm@strong+adapted``) beside the
default-setting record of the same training (``trainables/attacks/tuning.py``).

Here, not in the tuner, so that the analysis reads the rule without importing torch.
"""

from __future__ import annotations

ADAPTED = "adapted"


def adapted_label(label: str) -> str:
    """The adapted attack's record label: ``pmc@adapted``, ``tbm@strong+adapted``."""
    return f"{label}{'+' if '@' in label else '@'}{ADAPTED}"


def is_adapted(label: str) -> bool:
    return label.endswith((f"@{ADAPTED}", f"+{ADAPTED}"))


def base_label(label: str) -> str:
    """The default-setting label an adapted one was tuned from (itself if not adapted)."""
    return label[: -len(ADAPTED) - 1] if is_adapted(label) else label
