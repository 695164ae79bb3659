"""``python -m trainables.run``: one JSON line out; bad input exits 2 naming value and choices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainables.run import main

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainables.run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_cli_prints_one_json_line_with_the_required_keys() -> None:
    proc = _run("--dataset", "breast_cancer", "--epochs", "5", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    out = json.loads(lines[0])
    for key in ("mp", "rounds", "comm_bytes", "train_seconds"):
        assert key in out
    assert out["seed"] == 1 and out["rounds"] == 5 and 0.5 < out["mp"] <= 1.0


def test_cli_bad_input_exits_2_in_a_real_process() -> None:
    proc = _run("--dataset", "imagenet")
    assert proc.returncode == 2
    assert "imagenet" in proc.stderr and "breast_cancer" in proc.stderr and "digits" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--dataset", "nope"], ["'nope'", "breast_cancer"]),
        (["--model", "resnet"], ["'resnet'", "mlp2", "lr"]),
        (["--protocol", "gossip"], ["'gossip'", "fedsgd", "fedbcd"]),
        (["--partition", "vertical"], ["vertical", "agg", "split"]),
        (["--parties", "31"], ["n_parties=31", "30"]),
        (["--aligned-ratio", "0"], ["aligned_ratio", "0"]),
        (["--aligned-ratio", "1.5"], ["aligned_ratio", "1.5"]),
        (["--n-labeled", "100000"], ["n_labeled", "100000", "455"]),
        (["--transport", "mpi"], ["'mpi'", "local", "ray"]),
        (["--protocol", "fedbcd", "--q", "0"], ["q=0"]),
        (["--device", "tpu"], ["device", "tpu"]),
    ],
)
def test_cli_bad_input_names_the_value_and_what_is_allowed(
    args: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    for fragment in expected:
        assert fragment in err, (fragment, err)


def test_cli_missing_data_file_names_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dataset", "adult", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "adult.data" in err
