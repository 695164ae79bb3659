"""What a FedCVT party is built from: plain data, no party class.

Why apart from ``cvt_init.py``: the parties read these fields, and the init names the
parties' classes to build them; with the fields here neither party module imports the
init (no import cycle, type-only ones included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainables.party import PartyConfig
from trainables.ssl.fedcvt import CvtOptions

if TYPE_CHECKING:
    from trainables.protocols.base import HookEntry


@dataclass(frozen=True)
class CvtLabels:
    """Only the active party's: labels of its overlap rows (with a labeled mask), of its own
    non-overlapping rows, and of the test rows."""

    y_ol: np.ndarray  # (n_ol,) int64
    labeled_ol: np.ndarray  # (n_ol,) bool: which overlap rows count as labeled
    y_nl: np.ndarray  # (n_nl_B,) int64
    y_test: np.ndarray  # (n_test,) int64


@dataclass(frozen=True)
class CvtPartyData:
    """Everything one FedCVT party is built from (``CvtPartyInit`` adds the build)."""

    party_id: int
    X_ol: np.ndarray  # (n_ol, a_p) float32, overlap rows in the agreed order
    X_nl: np.ndarray  # (n_nl_p, a_p) float32, this party's non-overlapping rows
    X_test: np.ndarray  # (n_test, a_p) float32
    config: PartyConfig  # model, sizes, lr, batch, seed, local_steps (Q), device
    options: CvtOptions
    steps: int  # rounds per epoch (``steps_per_epoch``), the same at both parties
    peer_nl: int = 0  # the other party's non-overlapping row count (schedule only)
    labels: CvtLabels | None = None  # active party only
    record: bool = False  # keep a MessageLog (attacks that read messages)
    install: tuple[tuple[str, dict[str, object], object], ...] = ()  # training-time attacks
    hooks: tuple[HookEntry, ...] = ()  # defenses, then codecs
