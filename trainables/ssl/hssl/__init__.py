"""FedHSSL family (FedSplitNN, FedLocal/FedCSSL/FedGSSL/FedHSSL x SimSiam/BYOL/MoCo).

``variants.run_hssl_trial`` runs one spec; ``variants.HSSL_VARIANTS`` lists the names.
"""
