"""MC, FedHSSL's model completion attack (He et al.; after Fu et al. 2022).

The passive attacker trains an inference head on its trained (here: fine-tuned; FedHSSL
pretraining does not exist yet) local encoder with 80 auxiliary labeled rows in total,
then labels the test rows from its own features. Same completion as PMC
(``completion.py``); only the label budget differs.
AP: label recovery accuracy on the test rows.
"""

from __future__ import annotations

from trainables.attacks.base import AttackInfo
from trainables.attacks.pmc import PassiveModelCompletion


class ModelCompletion(PassiveModelCompletion):
    name = "mc"
    info = AttackInfo(type="LI", role="passive", training_time=False, aux_labels_total=80)


ATTACK = ModelCompletion
