"""The command lines: ``python -m trainables.run`` prints one JSON line and exits 2 on bad
input naming value and choices; each ``vflsweep`` subcommand's ``--help`` says what it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweep_engine import vflsweep
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


# What each subcommand's --help must say it does (lowercase fragments of its description).
SAYS = {
    "run": ["run a sweep", "resumes"],
    "plan": ["dry run", "without running"],
    "analyze": ["answer tables", "report"],
    "status": ["running or finished sweep"],
    "verify": ["page checksums", "nothing is changed"],
    "ui": ["mlflow's ui", "sigterm"],
    "spaces": ["shipped"],
}


def _description(help_text: str) -> str:
    """The paragraph after the usage lines, on one line (argparse wraps it)."""
    return " ".join(help_text.split("\n\n")[1].split())


def test_each_vflsweep_command_help_says_what_that_command_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert set(SAYS) == set(vflsweep.COMMANDS), "a new subcommand needs its --help checked here"
    descriptions = {}
    for command, fragments in SAYS.items():
        assert vflsweep.main([command, "--help"]) == 0, command
        out = capsys.readouterr().out
        assert out.startswith(f"usage: vflsweep {command}"), out  # not python -m analysis
        descriptions[command] = _description(out)
        for fragment in fragments:
            assert fragment in descriptions[command].lower(), (command, descriptions[command])
    assert len(set(descriptions.values())) == len(descriptions), descriptions
    assert vflsweep.main(["plan", "smoke", "--help"]) == 0  # after SPACE, as argparse reads it
    assert "Dry run" in capsys.readouterr().out


def test_vflsweep_plan_help_in_a_real_process_says_it_runs_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sweep_engine.vflsweep", "plan", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: vflsweep plan")
    assert "Dry run" in proc.stdout and "Run a sweep" not in proc.stdout


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_vflsweep_spaces_into_a_closed_pipe_ends_quietly(unbuffered: str) -> None:
    """Issue 63: ``vflsweep spaces | head -1`` printed a BrokenPipeError traceback. Here the
    reader is gone before the first line (deterministic, unlike ``head``'s timing): the
    command ends without a traceback, with the exit code of a command SIGPIPE ended (what
    ``ls | head`` reports), whether stdout writes each line at once or at exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "sweep_engine.vflsweep", "spaces"],
            cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stderr == ""
    assert proc.returncode == 141, proc.returncode


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "the following arguments are required: sweep_dir"),
        (["results/x", "--beta", "abc"], "argument --beta: invalid float value: 'abc'"),
    ],
)
def test_vflsweep_analyze_usage_errors_name_vflsweep_analyze(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 63: called as ``vflsweep analyze``, the usage line and argparse's errors named
    ``python -m analysis``; ``python -m analysis`` itself keeps its own name."""
    assert vflsweep.main(["analyze", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: vflsweep analyze ") and f"vflsweep analyze: error: {says}" in err
    assert "python -m analysis" not in err

    from analysis.cli import main as analysis_main

    with pytest.raises(SystemExit):
        analysis_main(argv)
    assert "python -m analysis: error: " in capsys.readouterr().err
