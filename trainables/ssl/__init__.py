"""Self- and semi-supervised VFL variants (``TrialSpec.ssl_variant``).

- ``fedcvt`` (alias ``fedmvt``) and ``fedsplitnn``: FedCVT/FedMVT and FedSplitNN on
  FedCVT's models (``fedcvt.py``, ``cvt_party.py``, ``cvt_active.py``, ``cvt_init.py``,
  ``cvt_rounds.py``, ``runner.py``); trial kind ``trainables.kinds.fedcvt``. FedCVT's
  options (temperature, thresholds, loss weights, ``n_local``, ``rep_dim``) are set with
  ``model_params``; ``n_aligned`` / ``n_labeled`` choose the overlap.
- The FedHSSL family (``hssl/``); trial kind ``trainables.kinds.hssl``.

Dispatch lives in the kinds registry (``trainables.kinds``: ``kind_of``,
``ssl_variant_names``) and ``trainables.trial.run_trial``; this package has none.
"""
