"""The NN-VFL library, below the trial kinds.

``training.py`` prepares, trains and records one aggVFL / splitVFL training; ``lockstep.py``
and ``vectorized.py`` (with ``vec_stack.py``) run a pack of them. ``kinds/nn.py`` (plain NN
VFL), ``kinds/fedcvt.py`` and the FedHSSL fine-tuning in ``ssl/hssl/`` import it; it imports
no kind, so the layers stay ``vfl`` < ``ssl`` < ``kinds`` (``tests/test_layers.py``).
"""
