"""The NN-VFL library, below the trial kinds.

``vectorized.py`` groups a pack's aggVFL / splitVFL trainings into stacks (those that
stack together; every other one alone, a stack of one); ``training.py`` prepares and
records them and trains every stack (``train_stacked``, on ``stacked_party.py``'s parties and
``stacked_rounds.py``'s rounds): the one training code. ``kinds/nn.py`` (plain NN
VFL), ``kinds/fedcvt.py`` and the FedHSSL fine-tuning in ``ssl/hssl/`` import it; it imports
no kind, so the layers stay ``vfl`` < ``ssl`` < ``kinds`` (``tests/test_layers.py``).
"""
