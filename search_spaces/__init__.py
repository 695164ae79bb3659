"""The shipped search spaces (``*.yaml``), installed with the package as data.

``vflsweep run smoke`` and ``python sweep.py --space smoke`` find them here by name; see
``README.md`` in this folder for what each one asks.
"""
