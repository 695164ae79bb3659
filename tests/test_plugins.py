"""Third-party plugins through entry points (``trainables/plugins.py``, docs/plugins.md).

The example package ``examples/vflsweep-example-defense`` is built as a real wheel
(offline) and unpacked with its ``.dist-info``, so that ``importlib.metadata`` finds its
entry point exactly as it finds an installed package's. A second, hand-made distribution
holds plugins that break the rules. A plugin is only visible where a test puts it on the
path: the normal test process has none (``test_defense_conformance.py`` counts exactly the
built-ins).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import test_defense_conformance as conformance  # the built-ins' suite, run on the plugin
from test_sweep_integration import sweep, write_space

from trainables.attacks import ATTACKS, Attack, AttackInfo
from trainables.attacks.base import check_attack
from trainables.data import DATASETS
from trainables.data.catalog import builtin, check_dataset, reject_params
from trainables.data.dataset import build_dataset
from trainables.defenses import DEFENSES, Defense, DefenseInfo
from trainables.defenses import MODULES as DEFENSE_MODULES
from trainables.defenses.base import check_defense
from trainables.errors import ConfigError
from trainables.kinds import TRIAL_KINDS, TrialKind, check_kind
from trainables.plugins import PluginWarning, Refused
from trainables.registry import Registry
from trainables.results.layout import read_live

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "vflsweep-example-defense"
MODULES = ("vflsweep_example_defense", "vflsweep_test_plugins")

BROKEN = '''
import numpy as np
from trainables.data.catalog import builtin
from trainables.data.dataset import build_dataset
from trainables.defenses.base import Defense, DefenseInfo


class Hookless(Defense):
    """Declares itself fully but overrides no hook: it would change nothing."""
    name = "hookless"
    info = DefenseInfo(party="active", grid=(0.1,), neutral=0.0, quantity="nothing")


class BadGrid(Defense):
    name = "bad_grid"
    info = DefenseInfo(party="active", grid=(0.1, 7.0), neutral=0.0, quantity="x", high=1.0)

    def on_send(self, party, msg):
        return msg


class NotGdp(BadGrid):
    name = "gdp"


@builtin
def tiny(data_dir=None, **params):
    """A valid dataset plugin: 40 rows, 4 columns, 2 classes."""
    if params:
        from trainables.errors import ConfigError
        raise ConfigError(f"dataset 'tiny' got unknown parameter(s) {sorted(params)}")
    X = np.arange(160, dtype=float).reshape(40, 4)
    y = np.arange(40) % 2
    return build_dataset("tiny", X[:30], y[:30], X[30:], y[30:], 2, ["a", "b", "c", "d"])
'''
ENTRY_POINTS = """
[vflsweep.defenses]
hookless = vflsweep_test_plugins:Hookless
bad_grid = vflsweep_test_plugins:BadGrid
gdp = vflsweep_test_plugins:NotGdp
unimportable = vflsweep_no_such_module:Defense

[vflsweep.datasets]
tiny = vflsweep_test_plugins:tiny
"""
REFUSED = {
    "hookless": "plugin defense 'hookless' from package vflsweep-test-plugins is refused: "
    "it is missing method on_send",
    "bad_grid": "its info.grid value 7.0 lies outside [0.0, 1.0]",
    "gdp": "the name 'gdp' is taken by a built-in defense",
    "unimportable": "importing vflsweep_no_such_module:Defense failed: ModuleNotFoundError",
}


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example built as a wheel and unpacked: on the path, an installed package."""
    tmp = tmp_path_factory.mktemp("example")
    source = tmp / "src"
    shutil.copytree(EXAMPLE, source)  # pip builds in the source tree: keep the checkout clean
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(tmp / "wheel"), str(source)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp / "site")
    return tmp / "site"


def dist_site(site: Path, package: str, modules: dict[str, str], entry_points: str) -> Path:
    """``site`` as pip leaves an installed distribution: its modules (name -> source) and
    a dist-info declaring ``entry_points``."""
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)
    meta = site / f"{package.replace('-', '_')}-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\n")
    (meta / "entry_points.txt").write_text(entry_points)
    return site


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A distribution as pip leaves one (module + dist-info) with rule-breaking plugins."""
    site = tmp_path_factory.mktemp("broken")
    return dist_site(site, "vflsweep-test-plugins", {"vflsweep_test_plugins": BROKEN}, ENTRY_POINTS)


@contextmanager
def on_path(site: Path) -> Iterator[None]:
    """``site`` importable and its entry points visible, for the ``with`` block only."""
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(site))
        for module in MODULES:
            sys.modules.pop(module, None)


@contextmanager
def installed(site: Path) -> Iterator[list[warnings.WarningMessage]]:
    """The live DEFENSES re-read with ``site`` on the path; yields the warnings of that
    load. On exit the registry holds exactly the built-ins again."""
    with on_path(site), DEFENSES.isolated(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DEFENSES.load_plugins()
        yield caught


@pytest.fixture
def example(example_site: Path) -> Iterator[None]:
    with installed(example_site):
        yield


def test_no_plugin_is_visible_unless_a_test_installs_one(example_site: Path) -> None:
    builtins = DEFENSES.names()
    assert "clip_norm" not in builtins and DEFENSES.plugins == {}
    assert sorted(builtins) == sorted(DEFENSE_MODULES)  # the built-ins only, by their modules
    with installed(example_site) as caught:
        assert DEFENSES.names() == sorted([*builtins, "clip_norm"]) and not caught
        assert DEFENSES.plugins == {"clip_norm": "vflsweep-example-defense"}
        assert DEFENSES.get("clip_norm").__module__ == "vflsweep_example_defense.clip_norm"
    assert DEFENSES.names() == builtins and DEFENSES.plugins == {}


# -- the load-time rules are the ones the built-ins obey --------------------------------
@pytest.mark.parametrize(
    ("registry", "check"),
    [(DEFENSES, check_defense), (ATTACKS, check_attack), (TRIAL_KINDS, check_kind),
     (DATASETS, check_dataset)],
    ids=["defenses", "attacks", "kinds", "datasets"],
)  # fmt: skip
def test_every_builtin_obeys_the_plugin_rules(registry: Registry[Any], check: Any) -> None:
    assert registry.check is check  # the rules a plugin meets are the ones tested here
    for name in registry.names():
        check(registry.get(name), name)  # a Refused here names the rule a built-in breaks


class _NoRun(Attack):
    name = "no_run"
    info = AttackInfo(type="LI", role="passive", training_time=False)


class _NoInstall(_NoRun):
    name = "no_install"
    info = AttackInfo(type="LI", role="passive", training_time=True)

    def run(self, view: Any) -> Any:
        return None


class _BadPreset(_NoInstall):
    name = "bad_preset"
    info = AttackInfo(type="LI", role="passive", training_time=False)
    defaults = {"steps": 10}  # noqa: RUF012
    presets = {"fast": {"step": 5}}  # noqa: RUF012


class _NoRunKind(TrialKind):
    name = "no_run_kind"
    ssl_variants = ("mine",)


class _FedcvtAgain(_NoRunKind):
    name = "fedcvt_again"
    ssl_variants = ("fedcvt",)

    def run(self, spec: Any, ds: Any, placement: Any, attacks: Any) -> Any:
        return []


class _YamlParam(Defense):
    name = "yaml_param"
    info = DefenseInfo(party="active", grid=(1.0,), neutral=None, quantity="x")
    defaults = {"on": 1}  # noqa: RUF012

    def on_send(self, party: Any, msg: Any) -> Any:
        return msg


def _greedy(data_dir: Any = None, **params: Any) -> Any:
    return None  # takes any parameter: a typo in a space would pass silently


@builtin
def _misnamed(data_dir: Any = None, **params: Any) -> Any:
    reject_params("misnamed", params)
    y = np.arange(10) % 2
    return build_dataset("other", np.ones((10, 2)), y, np.ones((10, 2)), y, 2, ["a", "b"])


@pytest.mark.parametrize(
    ("check", "obj", "name", "fragment"),
    [
        (check_attack, _NoRun, "no_run", "missing method run(view)"),
        (check_attack, _NoInstall, "no_install", "missing method install(party, aux)"),
        (check_attack, _BadPreset, "bad_preset", "preset 'fast' sets unknown parameters"),
        (check_attack, _NoInstall, "other", "name 'no_install' differs from its entry-point"),
        (check_kind, _NoRunKind, "no_run_kind", "missing method run(spec, ds"),
        (check_kind, _FedcvtAgain, "fedcvt_again", "['fedcvt'] are served by the kind 'fedcvt'"),
        (check_defense, _YamlParam, "yaml_param", "['on'] are booleans in YAML 1.1"),
        (check_defense, int, "int", "not a subclass of trainables.defenses.base.Defense"),
        (check_dataset, _greedy, "greedy", "took the unknown parameter zz_probe=1"),
        (check_dataset, _misnamed, "misnamed", "returned Dataset 'other', not a Dataset named"),
    ],
)
def test_a_plugin_breaking_a_rule_is_refused_with_it(
    check: Any, obj: Any, name: str, fragment: str
) -> None:
    with pytest.raises(Refused) as refused:
        check(obj, name)
    assert fragment in str(refused.value)


def test_broken_plugins_are_refused_whole_and_named_ones_fail_with_the_reason(
    broken_site: Path,
) -> None:
    gdp = DEFENSES.get("gdp")
    with installed(broken_site) as caught:
        assert "hookless" not in DEFENSES and "bad_grid" not in DEFENSES.names()
        assert DEFENSES.plugins == {} and DEFENSES.get("gdp") is gdp  # the built-in stays
        for name, fragment in REFUSED.items():
            assert fragment in DEFENSES.refused[name]
            if name != "gdp":
                with pytest.raises(ConfigError, match=name) as err:
                    DEFENSES.create(name, strength=0.1)
                assert fragment in str(err.value)
        assert sorted(str(w.message).split("'")[1] for w in caught) == sorted(REFUSED)
        assert all(w.category is PluginWarning for w in caught)
        DEFENSES.load_plugins()  # a second read refuses the same, without a second copy
        assert DEFENSES.plugins == {} and "hookless" not in DEFENSES
    assert DEFENSES.refused == {}


def test_a_registry_loads_its_group_on_its_first_read(broken_site: Path) -> None:
    fresh: Registry[Any] = Registry("dataset", "vflsweep.datasets", check=check_dataset)
    with on_path(broken_site):
        assert "tiny" in fresh  # the first read loads the group
        assert fresh.plugins == {"tiny": "vflsweep-test-plugins"}
        ds = fresh.get("tiny")(None)
    assert ds.n_classes == 2 and ds.X_train.shape == (30, 4)
    assert "tiny" not in DATASETS  # a copy: the live registry never saw it


# -- the example passes the built-ins' defense conformance suite ------------------------
@pytest.mark.usefixtures("example")
def test_example_passes_the_defense_conformance_suite() -> None:
    conformance.test_info_is_consistent("clip_norm")
    conformance.test_neutral_strength_trains_exactly_like_no_defense("clip_norm")
    conformance.test_strongest_strength_keeps_messages_and_changes_training("clip_norm")
    for fields, match in [
        ({"defense_param": 1.5}, r"strength=1.5; allowed: 0.0 <= strength <= 1.0"),
        ({"defense_params": {"party": "passive"}}, "party='passive'; allowed: active"),
        ({"defense_params": {"clip": 1}}, r"unknown parameter\(s\) \['clip'\]"),
    ]:
        conformance.test_bad_defense_settings_are_config_errors(
            {"defense": "clip_norm", **fields}, match
        )


@pytest.mark.usefixtures("example")
def test_example_strength_is_the_share_of_rows_it_clips() -> None:
    """The probe of the conformance suite's ``PROBES``: the quantity the strength moves."""
    msg = conformance._grad_msg()  # 512 rows of distinct norms
    norms = np.linalg.norm(msg.payload, axis=1)
    for strength in DEFENSES.get("clip_norm").info.grid:
        out = conformance._sent("clip_norm", strength, msg)
        clipped = (out != msg.payload).any(axis=1)  # a row kept is passed on bit for bit
        assert clipped.mean() == pytest.approx(strength, abs=2 / len(norms))
        cos = (out * msg.payload).sum(1) / (np.linalg.norm(out, axis=1) * norms)
        assert np.allclose(cos, 1.0, atol=1e-5)  # directions kept: only norms change


# -- end to end: a real sweep, and a real refusal at plan time --------------------------
def _sweep(
    monkeypatch: pytest.MonkeyPatch, site: Path, tmp_path: Path, defenses: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``sweep.py`` in a new process that finds the plugins of ``site`` through PYTHONPATH
    (as do the local Ray workers it starts), on a one-seed space naming ``defenses``."""
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    space = write_space(
        tmp_path,
        "plugin",
        "base: {dataset: breast_cancer, n_parties: 2, epochs: 3}\n"
        f"grid: {{seed: [0]}}\ndefenses: {{{defenses}}}\nattacks: [ns]\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n",
    )
    return sweep("--space", str(space), "--results", str(tmp_path / "r"), *args)


@pytest.mark.ray
def test_a_sweep_naming_the_plugin_records_it_beside_a_builtin(
    tmp_path: Path, example_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _sweep(monkeypatch, example_site, tmp_path, "clip_norm: [0.5], gdp: [0.01]",
                 "--no-mlflow")  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    rows = read_live(tmp_path / "r" / "plugin" / "records").to_pylist()
    assert {(r["defense"], r["attack"]) for r in rows} == {
        (d, a) for d in ("none", "gdp", "clip_norm") for a in ("none", "ns")
    }
    ours = [r for r in rows if r["defense"] == "clip_norm"]
    assert all(r["status"] == "ok" and r["defense_param"] == 0.5 for r in ours)
    # trained in a Ray worker, which found the plugin through PYTHONPATH and applied it
    assert all(json.loads(r["extra"])["defense_applied"]["clip_norm"]["gradient"] for r in ours)


def test_a_sweep_naming_a_refused_plugin_stops_at_plan_time(
    tmp_path: Path, broken_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = _sweep(monkeypatch, broken_site, tmp_path, "hookless: [0.1]", "--dry-run")
    assert named.returncode == 2, named.stdout + named.stderr
    assert "defenses.hookless" in named.stderr and REFUSED["hookless"] in named.stderr
    assert "Traceback" not in named.stderr

    other = _sweep(monkeypatch, broken_site, tmp_path, "gdp: [0.01]", "--dry-run")
    assert other.returncode == 0, other.stderr[-3000:]
    assert "trainings:   2" in other.stdout
    assert other.stderr.count("plugin defense 'hookless'") == 1  # warned once, not broken
    assert not (tmp_path / "r").exists()
