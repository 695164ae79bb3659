"""``python -m benchmarks.checksums``: does ``check_file`` catch changed bytes in a record file?

Writes one record file the way a sweep does (``RecordSink.write``: Parquet page checksums
plus the sha256 digest of the records in the footer), then, for every ``--stride``-th byte,
flips one bit (bit ``offset % 8``) in a copy and runs ``check_file`` on it. Each flip is:

- ``detected``: ``check_file`` names a reason, so the file is quarantined and re-run;
- ``harmless``: not detected, and the file reads back to exactly the records written
  (same column names, types and values): the byte was one no reader looks at (the magic
  number's unused bits, header fields, a metadata key's name);
- ``silent``: not detected and the records differ. This must be 0; the test
  ``tests/test_reliability_records.py`` checks a sample of offsets.

Prints one JSON object: file size, rows, flips, the three counts, and the median seconds
of one ``check_file`` on the intact file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from sweep_engine.sink import RecordSink
from trainables.records import Record
from trainables.results.checks import check_file
from trainables.spec import TrialSpec

TRIAL_ID = "0123456789abcdef"


def record_file(folder: Path) -> Path:
    """A 3-row record file as a sweep writes it: the clean row and two attack rows."""
    spec = TrialSpec.build(dataset="breast_cancer", epochs=50, seed=3)
    clean = Record.clean(
        spec, 455, mp=0.9561, rounds=50, comm_bytes=1_843_200, train_seconds=1.42,
        sweep="checksums", trial_id=TRIAL_ID, extra=json.dumps({"auc": 0.991}),
    )  # fmt: skip
    attacks = [
        dataclasses.replace(clean, attack=name, attack_type="LI", attacker_party=0, ap=ap,
                            attack_seconds=secs)
        for name, ap, secs in (("dli", 1.0, 0.03), ("ns", 0.774, 0.41))
    ]  # fmt: skip
    return RecordSink(folder).write(TRIAL_ID, [clean, *attacks])


def _content(path: Path) -> tuple[list[str], list[dict]]:
    table = pq.read_table(path)
    return [f"{f.name}:{f.type}" for f in table.schema], table.to_pylist()


def classify(original: Path, flipped: Path) -> str:
    """``detected``, ``harmless`` or ``silent`` for one damaged copy (see the module doc)."""
    if check_file(flipped) is not None:
        return "detected"
    try:
        same = _content(flipped) == _content(original)
    except Exception:  # unreadable yet accepted would be silent corruption too
        same = False
    return "harmless" if same else "silent"


def flip(original: Path, target: Path, offset: int) -> None:
    """``target`` = ``original`` with bit ``offset % 8`` of byte ``offset`` inverted."""
    data = bytearray(original.read_bytes())
    data[offset] ^= 1 << (offset % 8)
    target.write_bytes(bytes(data))


def study(stride: int, start: int = 0) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        original = record_file(folder / "sweep")
        size = original.stat().st_size
        damaged = folder / original.name
        counts = {"detected": 0, "harmless": 0, "silent": 0}
        silent: list[int] = []
        for offset in range(start, size, stride):
            flip(original, damaged, offset)
            kind = classify(original, damaged)
            counts[kind] += 1
            if kind == "silent":
                silent.append(offset)
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            assert check_file(original) is None
            times.append(time.perf_counter() - t0)
        return {
            "benchmark": "checksums",
            "file_bytes": size,
            "rows": pq.read_metadata(original).num_rows,
            "stride": stride,
            "flips": sum(counts.values()),
            **counts,
            "silent_offsets": silent,
            "check_seconds_median": round(statistics.median(times), 5),
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stride", type=int, default=7, help="flip a bit in every Nth byte")
    args = p.parse_args(argv)
    print(json.dumps(study(args.stride)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
