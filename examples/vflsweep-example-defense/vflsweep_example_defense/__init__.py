"""An example vflsweep plugin package: one defense, ``clip_norm`` (``clip_norm.py``).

vflsweep finds it through the entry point in this package's ``pyproject.toml``; nothing
here registers anything by itself.
"""
