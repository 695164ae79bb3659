"""FedHSSL family (FedSplitNN, FedLocal/FedCSSL/FedGSSL/FedHSSL x SimSiam/BYOL/MoCo).

Trial kind ``trainables.kinds.hssl``; ``trial.run_hssl`` runs one spec (``pretrain.py``
then ``finetune.py``); ``variants.HSSL_VARIANTS`` lists the names.
"""
