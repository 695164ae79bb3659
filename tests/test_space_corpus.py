"""A corpus of malformed spaces (``tests/spaces_malformed/``, one fault per file): each one
exits 2 naming the key path, the bad value and what is allowed, writes nothing and never
starts Ray. Each file's first line says what its error must contain:
``# expect: <key path> | <bad value> | <allowed>``; ``# needs: no-gpu`` skips it where a
GPU is present.

Runs ``sweep_engine.cli.main`` in-process (fast); a few files also go through a real
``python sweep.py`` process for the exit code end to end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sweep_engine.cli import main
from sweep_engine.space import (
    AdaptEntry,
    AnalysisBlock,
    AttackEntry,
    DefenseAxis,
    Objective,
    Resources,
    RunSettings,
    SearchBlock,
    SearchParam,
    Space,
)
from trainables.spec import DefenseEntry, TrialSpec

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "spaces_malformed"
FILES = sorted(CORPUS.glob("*.yaml"))


def expectation(path: Path) -> tuple[list[str], bool]:
    """The ``# expect:`` fragments of a corpus file, and whether it needs a GPU-less machine."""
    lines = path.read_text().splitlines()
    match = re.fullmatch(r"# expect: (.+)", lines[0])
    assert match, f"{path.name}: the first line must be '# expect: path | value | allowed'"
    fragments = [f.strip() for f in match.group(1).split(" | ")]
    assert len(fragments) == 3, f"{path.name}: give key path | bad value | allowed"
    return fragments, "# needs: no-gpu" in lines[:3]


def test_the_corpus_is_big_enough() -> None:
    assert len(FILES) >= 60


@pytest.mark.parametrize("space", FILES, ids=[p.stem for p in FILES])
def test_malformed_space_is_refused_with_path_value_and_allowed(
    space: Path, refused_sweep: Callable[..., str]
) -> None:
    fragments, no_gpu = expectation(space)
    if no_gpu:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this fault is a GPU request on a machine without one")
    err = refused_sweep(space, fragments)
    assert len(err) < 2000, "an error message should not print the whole space"


def test_every_key_of_the_schema_has_a_malformed_space() -> None:
    """Each field of every schema model is the faulty key (a path component) of some file."""
    models = (Space, Resources, RunSettings, SearchBlock, SearchParam, Objective)
    models += (AttackEntry, DefenseAxis, TrialSpec, DefenseEntry, AnalysisBlock, AdaptEntry)
    keys = {k for m in models for k in m.model_fields} - {"source"}
    named: set[str] = set()
    for path in FILES:
        key_path = expectation(path)[0][0]
        named |= {p for p in re.split(r"[.\[\]]", key_path) if p}
    assert keys - named == set()


ENCODED = {
    "latin1": ("name: caf\xe9\n".encode("latin-1"), ["not UTF-8", "byte 0xe9", "line 1"]),
    "utf16": ("name: x\n".encode("utf-16"), ["UTF-16", "allowed: UTF-8"]),
    "binary": (bytes(range(256)), ["binary file", "NUL byte", "allowed: a UTF-8 text file"]),
    "control_chars": (b"name: x\x07\n", ["not valid YAML", "special characters"]),
}


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_a_file_that_is_not_utf8_text_is_refused(
    case: str, tmp_path: Path, refused_sweep: Callable[..., str]
) -> None:
    data, fragments = ENCODED[case]
    space = tmp_path / f"{case}.yaml"
    space.write_bytes(data)
    refused_sweep(space, fragments)


def test_a_utf8_bom_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "bom.yaml"
    space.write_bytes(b"\xef\xbb\xbfname: bom\nbase: {epochs: 2}\n")
    assert main(["--space", str(space), "--dry-run"]) == 0
    assert "space bom" in capsys.readouterr().out


def _sweep(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "sweep.py", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(
    "name", ["base_batch_size_bool", "duplicate_nested_key", "grid_huge", "base_epochs_quoted"]
)
def test_sweep_py_exits_2_in_a_real_process(name: str, tmp_path: Path) -> None:
    space = CORPUS / f"{name}.yaml"
    results = tmp_path / "results"
    proc = _sweep("--space", str(space), "--results", str(results))
    assert proc.returncode == 2, proc.stderr
    for fragment in expectation(space)[0]:
        assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr and not results.exists()
