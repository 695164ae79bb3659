"""What a report holds in memory: one dataclass, apart from the code that builds and
writes it (``report.py``), so the pages and plots that read it (``index_page.py``,
``plots.py``) import it without importing their own caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis.answer import Answer
from analysis.contrast import Contrasts
from analysis.worst_case import WorstCase


@dataclass
class Report:
    """What a report holds in memory (the CLI logs parts of it to MLflow)."""

    dcs: pd.DataFrame
    ranking: pd.DataFrame
    beta: pd.DataFrame
    cap: pd.DataFrame
    gaps: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, object] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    axes: list[str] = field(default_factory=list)  # the sweep's cell axes (seed left out)
    per_training: pd.DataFrame | None = None  # (axes, metric, value) per training
    by_axis: pd.DataFrame | None = None
    best: dict[str, object] = field(default_factory=dict)
    answer: Answer | None = None  # the printed tables (analysis/answer.py)
    contrasts: dict[str, Contrasts] = field(default_factory=dict)  # per --compare axis
    worst: WorstCase | None = None  # default vs adapted attacks (analysis/worst_case.py)

    @property
    def has_attacks(self) -> bool:
        return bool(self.summary.get("attack_rows", 0))
