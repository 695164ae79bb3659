"""FedSSL / FedSSL-DP (Fan et al., "Private Semi-Supervised Federated Learning").

Horizontal FL with scarce labels: support agents hold a few labeled rows, query agents
only unlabeled rows, a shared conditional generator G performs global MixUp across agents
and FedSSL-DP puts G's labeled updates through Opacus' DP-SGD under an RDP budget.
One short file per piece: ``options`` (model_params, variants), ``models`` (F, D, G),
``data`` (rows per agent, augmentation), ``local`` (G-Reg, G-MixUp, baselines),
``dp`` (Opacus DP-SGD, privacy ledger), ``agents`` (parties and their inits),
``protocol`` (the rounds), ``trial`` (a spec to a record). The trial kind is
``trainables/kinds/fedssl.py``.
"""

from trainables.fedssl.options import VARIANTS

__all__ = ["VARIANTS"]
