"""``vflsweep verify RESULTS/SWEEP``: check every record file of a sweep, change nothing.

Why a command of its own: a copied, synced or archived results folder can have lost bytes
anywhere, and Parquet readers (pandas, DuckDB, pyarrow's defaults) decode most changed
data pages without an error. This reads each file as the engine and the analysis do
(``trainables/results/checks.read_verified``: page checksums, the file's digest, a part's
sha256 against the manifest) and names each file that fails. It moves nothing: a re-run
of the sweep sets damaged files aside and redoes their trainings.

Exit codes: 0 every file verified; 3 some file is damaged; 2 not a sweep folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from sweep_engine.status import folder_parser
from sweep_engine.words import plural
from trainables.errors import ConfigError
from trainables.results.checks import read_verified

EXIT_DAMAGED = 3


def verify(sweep_dir: Path) -> dict[str, object]:
    """What a verified read of ``sweep_dir``'s records finds (files, records, damaged)."""
    folder = sweep_dir / "records" if (sweep_dir / "records").is_dir() else sweep_dir
    if not folder.is_dir():
        raise ConfigError(f"{sweep_dir}: no such folder (give RESULTS/SWEEP, e.g. results/smoke)")
    with warnings.catch_warnings():  # each damaged file is named below, once
        warnings.simplefilter("ignore")
        verified = read_verified(folder, ["trial_id"])
    if verified.files == 0 and not any(folder.glob("*.parquet")):
        raise ConfigError(f"{folder}: no record files (*.parquet); is it a sweep's folder?")
    trainings = len(set(verified.table.column("trial_id").to_pylist()))
    return {
        "records_dir": str(folder),
        "files": verified.files,
        "records": verified.table.num_rows,
        "trainings": trainings,
        "damaged": {str(p): why for p, why in verified.damaged.items()},
    }


def lines(result: dict[str, object]) -> list[str]:
    damaged = result["damaged"]
    assert isinstance(damaged, dict)
    files, trainings = int(str(result["files"])), int(str(result["trainings"]))
    head = (
        f"{result['records_dir']}: {plural(files, 'record file')} "
        f"({result['records']} records of {plural(trainings, 'training')}) "
    )
    if not damaged:
        return [head + "verified: every page checksum and digest matches"]
    out = [head + f"read; {plural(len(damaged), 'file')} DAMAGED, never read as results:"]
    out += [f"  {path}: {why}" for path, why in damaged.items()]
    out.append("  re-run the sweep to set them aside and redo their trainings")
    return out


def build_parser() -> argparse.ArgumentParser:
    return folder_parser(
        "vflsweep verify",
        "Check every record file of a sweep (page checksums, digests, the part manifest) and "
        "name each damaged one; nothing is changed. Exit 0: all verified; "
        f"{EXIT_DAMAGED}: some file is damaged; 2: not a sweep folder.",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = verify(Path(args.sweep))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else "\n".join(lines(result)))
    return EXIT_DAMAGED if result["damaged"] else 0


if __name__ == "__main__":
    sys.exit(main())
