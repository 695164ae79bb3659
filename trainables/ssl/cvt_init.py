"""What a FedCVT party is built from, and which of the two classes it builds.

Why its own module: the init names both classes (the active party B builds on A's
class, ``cvt_active.py`` on ``cvt_party.py``), so it sits above both and neither imports
it back.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainables.ssl.cvt_active import CvtActive
from trainables.ssl.cvt_fields import CvtLabels, CvtPartyData
from trainables.ssl.cvt_party import CvtParty

__all__ = ["CvtLabels", "CvtPartyData", "CvtPartyInit"]


@dataclass(frozen=True)
class CvtPartyInit(CvtPartyData):
    """Everything one FedCVT party is built from; sent to its actor as is."""

    def build(self) -> CvtParty:
        return CvtActive(self) if self.labels is not None else CvtParty(self)
