"""The NN-VFL library, below the trial kinds.

``vectorized.py`` (with ``vec_stack.py``) trains every aggVFL / splitVFL training that
stacks, a pack's or a lone one, as a stack of K; ``training.py`` prepares and records them
and trains one that does not stack on party objects. ``kinds/nn.py`` (plain NN
VFL), ``kinds/fedcvt.py`` and the FedHSSL fine-tuning in ``ssl/hssl/`` import it; it imports
no kind, so the layers stay ``vfl`` < ``ssl`` < ``kinds`` (``tests/test_layers.py``).
"""
