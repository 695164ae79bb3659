"""Start-up (issue 28): what a sweep's first seconds are spent on, kept from coming back.

A Tune trial's process starts its party actors before it imports torch (``entry``), so
the modules it needs for that must stay torch-free; a stacked pack's members build no
optimizer (building one imports ``torch._dynamo``, ~1.1 CPU-s a process); the command-line
processes skip Python's finalization (``cli.exit_process``). Timings themselves are in
``benchmarks.sweep_scale``, not here.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import ray

from sweep_engine.context import SweepContext
from sweep_engine.entry import prestart
from sweep_engine.grid import pack_config
from sweep_engine.packs import Pack
from sweep_engine.plan import Training
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.transport.ray_actors import PartyResources, RayParties, release_warm_actors
from trainables.transport.ray_actors.pool import POOL, pool_key
from trainables.trial import prepare_parties

ROOT = Path(__file__).resolve().parents[1]


def _fresh(
    code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _printed(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """What ``code`` prints in a fresh interpreter, which must exit 0."""
    done = _fresh(code, *args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_what_a_trial_imports_before_its_actors_start_has_no_torch() -> None:
    out = _fresh(
        "import sys\n"
        "import sweep_engine.entry, sweep_engine.context\n"
        "import trainables.transport.ray_actors.pool, trainables.transport.ray_actors.actor\n"
        "print(sorted(m for m in ('torch', 'sweep_engine.pack_trial') if m in sys.modules))\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_stacked_pack_in_process_never_imports_dynamo() -> None:
    """Two stackable trainings run stacked in this process, then a lone one (a stack of
    one): neither the trainings nor their members' (unused) optimizers pull in
    ``torch._dynamo``; building a ``torch.optim`` optimizer does (the control)."""
    code = (
        "import json, sys\n"
        "from trainables.data import load_dataset\n"
        "from trainables.jobs import Job\n"
        "from trainables.spec import TrialSpec\n"
        "from trainables.trial import run_pack\n"
        "jobs = [Job(TrialSpec.build(dataset='breast_cancer', epochs=2, seed=s), ())"
        " for s in (0, 1)]\n"
        "out = list(run_pack(jobs, ['a', 'b']))\n"
        "assert all(not isinstance(o, Exception) for _, o in out), out\n"
        "assert all(json.loads(r.extra)['vectorized'] for _, rs in out for r in rs), out\n"
        "out = list(run_pack(jobs[:1], ['c']))\n"
        "assert not isinstance(out[0][1], Exception), out\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    assert _printed(code) == "False"
    control = _printed(
        "import sys, torch\n"
        "torch.optim.Adam([torch.zeros(2, requires_grad=True)])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    assert control == "True"  # the probe can tell: a torch optimizer imports it


def _pack(**fields: object) -> Pack:
    spec = TrialSpec.build(dataset="breast_cancer", **fields)  # type: ignore[arg-type]
    return Pack((Training(spec=spec, cell={}),))


def test_only_packs_that_open_their_parties_first_ask_for_a_prestart() -> None:
    assert pack_config(_pack(n_parties=3))["prestart"] == "3"
    assert pack_config(_pack(model="secureboost"))["prestart"] == "0"


@pytest.mark.ray
def test_prestarted_actors_are_the_ones_the_first_group_takes(ray_session: None) -> None:
    release_warm_actors()
    spec = TrialSpec.build(dataset="breast_cancer", epochs=1)
    ctx = SweepContext("s", Placement("ray", cpu_per_party=0.5, reuse_actors=True), None)
    resources = PartyResources(cpu=0.5)
    prestart({"cell": {"prestart": "2"}}, ctx)
    (started,) = POOL[pool_key(2, resources)]
    prestart({"cell": {"prestart": "2"}}, ctx)  # a process Tune reuses: its warm set stays
    assert POOL[pool_key(2, resources)] == [started]
    try:
        inits = prepare_parties(spec, load_dataset("breast_cancer")).inits
        with RayParties(inits, resources, reuse=True) as group:
            assert group.reused
            assert group.actors == started.actors
            where = ray.get([a.where.remote() for a in group.actors])
            assert [w["party_id"] for w in where] == [0, 1]
    finally:
        release_warm_actors()
    local = SweepContext("s", Placement("local"), None)
    prestart({"cell": {"prestart": "2"}}, local)  # parties in-process: nothing to start
    assert not POOL
    search = dataclasses.replace(ctx, prestart=2)  # a search trial's config has no cell
    prestart({"lr": 0.1}, search)
    try:
        assert len(POOL[pool_key(2, resources)]) == 1
    finally:
        release_warm_actors()
    prestart({"lr": 0.1}, ctx)  # a search cell of a kind that opens other sets first
    assert not POOL


def test_exit_process_runs_atexit_and_flushes_then_exits_with_the_code() -> None:
    out = _fresh(
        "import atexit\n"
        "from sweep_engine.cli import exit_process\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "print('last line', end='')\n"
        "exit_process(3)\n"
    )
    assert out.returncode == 3
    assert out.stdout == "last lineatexit ran\n"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc (Linux)")
def test_exit_process_leaves_no_ray_process_behind() -> None:
    """With a local Ray up, ``exit_process`` still stops all of it (the monitor killed
    first, then Ray's own shutdown from ``atexit``), though it skips Python's finalization."""
    out = _fresh(
        "import os, ray\n"
        "from pathlib import Path\n"
        "from sweep_engine.cli import exit_process\n"
        "ray.init(address='local', num_cpus=1, include_dashboard=False)\n"
        "me = str(os.getpid())\n"
        "kids = [p.name for p in Path('/proc').iterdir() if p.name.isdigit()\n"
        "        and (p / 'stat').exists()\n"
        "        and (p / 'stat').read_text().rsplit(')', 1)[1].split()[1] == me]\n"
        "print(' '.join(kids), flush=True)\n"
        "exit_process(0)\n"
    )
    assert out.returncode == 0, out.stderr
    kids = out.stdout.split()
    assert kids  # the probe can see Ray's processes (gcs, raylet, monitor, ...)
    alive = [pid for pid in kids if Path(f"/proc/{pid}").exists()]
    assert not alive, alive


def test_tune_trial_actors_and_their_actors_start_without_a_runtime_env(
    ray_session: None, tmp_path: Path
) -> None:
    """Tune's own default (``PL_DISABLE_FORK``) made every trial actor and each party actor
    it started go through Ray's runtime-env set-up, ~0.6 CPU-s an actor
    (``runner.plain_trial_actors``); this checks the patch still takes in this Ray."""
    from ray import tune

    from sweep_engine.runner import plain_trial_actors

    @ray.remote(num_cpus=0)
    class Child:
        def env(self) -> str:
            return ray.get_runtime_context().get_runtime_env_string()

    def trainable(config: dict) -> None:
        child = Child.remote()  # type: ignore[attr-defined]
        own = ray.get_runtime_context().get_runtime_env_string()
        tune.report({"own": own, "child": ray.get(child.env.remote())})

    plain_trial_actors()
    grid = tune.Tuner(
        trainable, run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)
    ).fit()
    (result,) = list(grid)  # type: ignore[call-overload]
    assert result.error is None, result.error
    assert result.metrics["own"] in ("{}", ""), result.metrics["own"]
    assert result.metrics["child"] in ("{}", ""), result.metrics["child"]


@pytest.mark.parametrize("command", [["spaces"], ["status", "nowhere"], ["verify", "nowhere"]])
def test_the_vflsweep_commands_that_run_no_training_never_import_torch(
    command: list[str],
) -> None:
    """``vflsweep spaces`` / ``status`` / ``verify`` read files: torch is ~2.2 CPU-s of
    start-up they do not need. Until 2026-12-07 every ``vflsweep`` command imported it
    through the console script's exit. Here any import of torch raises, so the command
    would fail with it."""
    out = _fresh(
        "import sys\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        f"sys.argv = ['vflsweep', *{command!r}]\n"
        "from sweep_engine.vflsweep import console\n"
        "console()\n"
    )
    assert "torch" not in out.stderr, out.stderr[-3000:]
    assert out.returncode in (0, 2), out.stderr[-3000:]  # 2: no such sweep folder


def test_vflsweep_analyze_answers_a_sweep_without_importing_torch(tmp_path: Path) -> None:
    """``vflsweep analyze`` reads records, ranks and draws: the whole analysis of a real
    (synthetic, two defenses over three seeds) sweep folder runs with torch unimportable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analysis.synthetic import training
    from trainables.records import RECORD_SCHEMA

    rows = []
    for seed in range(3):
        rows += training(0.9, {"ns": ("LI", 0.9, None)}, seed=seed)
        rows += training(
            0.8, {"ns": ("LI", 0.6, None)}, seed=seed, defense="gdp", defense_param=0.1
        )
    (tmp_path / "records").mkdir()
    table = pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)
    pq.write_table(table, tmp_path / "records" / "all.parquet")
    out = _fresh(
        "import sys\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        f"sys.argv = ['vflsweep', 'analyze', {str(tmp_path)!r}]\n"
        "from sweep_engine.vflsweep import console\n"
        "console()\n"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch" not in out.stderr, out.stderr[-3000:]
    assert "gdp" in out.stdout, out.stdout[-2000:]  # the ranking table
    assert (tmp_path / "report" / "index.html").is_file()  # the report, figures included


def test_builtin_datasets_load_from_the_cache_without_scikit_learn(tmp_path: Path) -> None:
    """breast_cancer and digits: the first load in a machine's cache stores the arrays;
    a later process loads the same Dataset from them without importing scikit-learn
    (~1.2 CPU-s in the planner, each trial and each actor)."""
    code = (
        "import pickle, sys\n"
        "from trainables.data import load_dataset\n"
        "out = {n: load_dataset(n) for n in ('breast_cancer', 'digits')}\n"
        "print('sklearn' in sys.modules)\n"
        "sys.stdout.flush()\n"
        "pickle.dump(out, open(sys.argv[1], 'wb'))\n"
    )

    def load(name: str) -> tuple[bool, dict[str, object]]:
        path = tmp_path / name
        env = {**os.environ, "VFLSWEEP_CACHE": str(tmp_path / "cache")}
        imported = _printed(code, str(path), env=env) == "True"
        return imported, pickle.loads(path.read_bytes())

    imported_first, first = load("first.pkl")
    imported_later, later = load("later.pkl")
    assert imported_first and not imported_later
    assert sorted((tmp_path / "cache" / "data").iterdir())  # what the later one read
    for name in ("breast_cancer", "digits"):
        direct = load_dataset(name)  # this process: built from scikit-learn or the cache
        for dataset in (first[name], later[name]):
            for field in dataclasses.fields(direct):
                a, b = getattr(direct, field.name), getattr(dataset, field.name)
                if isinstance(a, np.ndarray):
                    assert a.dtype == b.dtype and np.array_equal(a, b), (name, field.name)
                else:
                    assert a == b, (name, field.name)


def test_tune_does_not_import_mlflow_to_count_callbacks_for_usage_stats_that_are_off() -> None:
    """Tune counts a run's callbacks for Ray's usage report by importing MLflow's
    integration (0.7 CPU-s before the first trial); the engine turns that report off."""
    code = (
        "import sys\n"
        "import sweep_engine.runner\n"
        "from ray import tune\n"
        "from ray.air._internal import usage\n"
        "usage.tag_callbacks([tune.Callback()])\n"
        "print('mlflow' in sys.modules)\n"
    )
    assert _printed(code) == "False"
    control = _printed(code.replace("usage.tag_callbacks(", "usage._count_callbacks("))
    assert control == "True"  # the probe can tell: Tune's count imports it
