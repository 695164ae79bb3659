"""The results folder as readers see it: the record files' layout, their checks, the sweep's
``manifest.json``.

Why a package of its own: ``sweep_engine`` writes a results folder and ``analysis`` reads
it, and the analysis must not import the engine that wrote it (its imports would pull in
the planner, Ray and the writers, and any import back would tie the two into one unit).
Both import the readers from here; the writers (``sweep_engine/sink.py``,
``sweep_engine/parts.py``, ``sweep_engine/compaction.py``, ``sweep_engine/manifest.py``)
stay in the engine. ``faults.py`` (test-only fault injection, inert unless
``VFLSWEEP_FAULT`` is set) is here too: the engine's writers and the analysis' MLflow
store both cut in there. Nothing here imports ``sweep_engine`` or ``analysis``.
"""
