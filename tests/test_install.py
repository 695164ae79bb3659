"""``pip install .`` gives a working ``vflsweep`` command, with the shipped spaces inside.

A real wheel build and install into a new virtual environment, then the installed console
script run as a subprocess from a folder that is not the repository. The new environment
reaches this one's dependencies through a ``.pth`` line instead of downloading them (CI has
no network for torch's wheels), so the test proves what the wheel carries: the packages,
the entry point and the spaces as package data.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SKIP_ANYWHERE = shutil.ignore_patterns(".git", "*.egg-info", "__pycache__")
_SKIP_AT_ROOT = {".venv", "results", "site", "build"}  # a package may be named results


def SKIP(folder: str, names: list[str]) -> set[str]:
    """What not to copy: build and sweep outputs at the checkout's root, caches anywhere."""
    skipped = set(_SKIP_ANYWHERE(folder, names))
    if Path(folder) == ROOT:
        skipped |= _SKIP_AT_ROOT & set(names)
    return skipped


@pytest.mark.slow
def test_pip_install_gives_a_working_vflsweep(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=SKIP)  # build from a copy: the checkout stays clean
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "_deps.pth").write_text("\n".join(ours) + "\n")  # deps, not vflsweep
    install = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    exe = env_dir / "bin" / "vflsweep"
    assert exe.exists(), "pip install did not create the vflsweep console script"

    work = tmp_path / "elsewhere"
    work.mkdir()
    run = dict(capture_output=True, text=True, timeout=300, cwd=work)
    listed = subprocess.run([exe, "spaces"], **run)  # type: ignore[call-overload]
    assert listed.returncode == 0, listed.stderr
    shipped = {p.stem for p in (ROOT / "search_spaces").glob("*.yaml")}
    assert shipped <= {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}

    env = {"VFLSWEEP_PROBE_S": "0", "VFLSWEEP_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin"}
    planned = subprocess.run([exe, "plan", "smoke", "--json"], env=env, **run)  # type: ignore[call-overload]
    assert planned.returncode == 0, planned.stderr[-3000:]
    summary = json.loads(planned.stdout.strip().splitlines()[-1])
    assert summary["trainings"] == 8
    assert Path(summary["source"]).is_relative_to(Path(purelib)), summary[
        "source"
    ]  # the wheel's copy

    bad = subprocess.run([exe, "plna", "smoke"], **run)  # type: ignore[call-overload]
    assert bad.returncode == 2 and "did you mean 'plan'" in bad.stderr
