"""Reproducible speed and quality measurements.

Each ``python -m benchmarks.<name>`` prints one JSON object.
"""
