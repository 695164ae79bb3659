"""The docs' commands are tests (issue 63): every command in README.md and docs/*.md that
runs the tool is collected at test time and run here on a tiny space, or skipped with the
reason it cannot run here, so a documented flag that crashes fails CI.

What is collected: the lines of ```bash / ```sh / ```console fences (``$`` prompts and
``# comments`` stripped, ``\\`` continuations joined) and inline ``code`` spans that invoke
``vflsweep``, ``python sweep.py``, ``python -m analysis``, ``python -m trainables.run``,
``python -m benchmarks.X`` or ``make`` (also spelled ``.venv/bin/...``). An inline span that
only names a command (``vflsweep analyze`` with no folder) is prose, not a command. A
synopsis's placeholders are filled in where the value is clear (``SPACE`` -> ``smoke``,
``RESULTS/SWEEP`` -> ``results/smoke``, an optional ``[--json]`` included); one that still
holds ``[options]``, an ``…`` or a ``<...>`` is a template and is skipped with that reason.

How a command runs: in ``bash -o pipefail`` from a temporary folder with ``.venv`` (a link
to the checkout's), ``sweep.py``, ``Makefile`` and ``pyproject.toml`` beside it, the venv
first on ``PATH`` (``python`` and ``vflsweep`` are the venv's). A dry run (``plan``,
``--dry-run``) reads the space as documented: a shipped one from search_spaces/, a space the
docs define in a ```yaml fence (``gdp_ns.yaml``) written as shown. Everything else runs in a
second folder where the space is a tiny copy written under the name the command uses (it
shadows the shipped one: a file in ``.`` comes first), so ``results/<name>`` is where the
docs say. A folder an ``analyze`` / ``status`` / ``verify`` reads comes from the documented
``run`` of that space, which runs first; where the docs run none, a ``vflsweep run`` of the
tiny space makes it once. ``make`` runs with ``-o .venv/.installed``: installing is
``make install``'s job (skipped here); the target's own recipe runs.

Each command must end with its documented exit code (0 unless the docs say otherwise) and
print no Python traceback. The last test prints how many commands were collected, run and
skipped, with the reasons.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
STAMP = ".venv/.installed"  # the Makefile's install stamp
EXAMPLE_PLUGIN = ROOT / "examples" / "vflsweep-example-defense"
TIMEOUT_S = 300

# --- collecting ---------------------------------------------------------------------------

SHELL_FENCES = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)[^\n]*\n"
    r"(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$",
    re.M | re.S,
)
INLINE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")
ENV_PREFIX = r"(?:[A-Za-z_][A-Za-z0-9_]*=\S+\s+)*"
TOOL = re.compile(
    rf"^{ENV_PREFIX}(?:\.venv/bin/)?"
    r"(?:vflsweep(?=\s|$)|make(?=\s)"
    r"|python(?:3(?:\.\d+)?)?\s+(?:sweep\.py(?=\s|$)"
    r"|-m\s+(?:analysis|trainables\.run|sweep_engine\.vflsweep|benchmarks\.\S+)(?=\s|$)))"
)
# an inline span naming a command that cannot run without its argument: prose, not a command
MENTION = re.compile(
    r"^(?:\.venv/bin/)?(?:vflsweep(?:\s+(?:run|plan|analyze|status|verify))?"
    r"|python\s+(?:sweep\.py|-m\s+analysis))$"
)
# a synopsis's placeholders with a clear value on the tiny sweep (applied in this order)
FOLDER = r"RESULTS/SWEEP|<results>/<sweep>|<sweep dir>|<sweep>|<dir>|\bDIR\b"
FILL_IN = [
    (re.compile(r"--results (?:DIR|<results>)(?=\s|$)"), "--results results"),
    (re.compile(FOLDER), "results/smoke"),
    (re.compile(r"\b(?:SPACE|FILE|NAME)\b"), "smoke"),
]
OPTIONAL = re.compile(r"\[(--[\w-]+(?: [^\]\[ ]+)?)\]")  # an optional flag, [--json]
PLACEHOLDER = re.compile(r"<[^>]*>|\[[^\]]*\]|…|\.\.\.|\s/\s|(?<![\w=\"'])[A-Z][A-Z_]+\b(?!=)")


@dataclass
class Command:
    """One distinct documented command: the text that runs, and where the docs show it."""

    text: str
    where: list[str] = field(default_factory=list)  # "docs/cli.md:29"
    written: set[str] = field(default_factory=set)  # the spellings before placeholders


def doc_pages() -> list[Path]:
    """README.md and every docs/*.md, read at test time (others edit them)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def strip_comment(line: str) -> str:
    """``line`` without a shell ``# comment`` (a ``#`` outside quotes, after a blank)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def fenced_commands(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command) for each command line of a shell fence in ``text``."""
    for fence in FENCE.finditer(text):
        lang = fence["lang"].lower()
        if lang not in SHELL_FENCES:
            continue
        first = text.count("\n", 0, fence.start("body")) + 1
        lines = fence["body"].splitlines()
        i = 0
        while i < len(lines):
            number, line = first + i, lines[i].strip()
            i += 1
            if line.startswith("$ "):
                line = line[2:]
            elif lang == "console":
                continue  # output, not a command
            while line.endswith("\\") and i < len(lines):
                line = line[:-1].rstrip() + " " + lines[i].strip()
                i += 1
            line = strip_comment(line)
            if line:
                yield number, line


def inline_commands(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command) for each inline code span of ``text`` outside fences."""
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for span in INLINE.finditer(prose):
        command = " ".join(span.group(1).split())
        if not MENTION.match(command):
            yield prose.count("\n", 0, span.start()) + 1, command


def fill_in(command: str) -> str:
    """``command`` with the placeholders that have a clear value on the tiny sweep filled."""
    if "…" in command or "-m benchmarks." in command:
        return command  # an ellipsis: a template as a whole; a benchmark is not run
    if "[" in OPTIONAL.sub("", command):
        return command  # [options]: a template as a whole
    command = OPTIONAL.sub(r"\1", command)  # [--json] -> --json: the fuller form runs
    for pattern, value in FILL_IN:
        command = pattern.sub(value, command)
    return command


def collect() -> list[Command]:
    """Every distinct documented tool command, in the order the docs first show it."""
    found: dict[str, Command] = {}
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(ROOT).as_posix()
        spans = [*fenced_commands(text), *inline_commands(text)]
        for number, written in sorted(spans):
            if not TOOL.match(written):
                continue
            # .venv/bin/X and X are one program here (the venv is first on PATH)
            runs_as = fill_in(re.sub(r"(?<![\w/])\.venv/bin/", "", written))
            command = found.setdefault(runs_as, Command(runs_as))
            command.where.append(f"{where}:{number}")
            command.written.add(written)
    return list(found.values())


# --- what cannot run here ------------------------------------------------------------------

BENCHMARK = "a benchmark: python -m benchmarks.X, run by hand"
TEMPLATE = (
    "a template: a placeholder ([...], <...>, …, COMMAND) stands for a value; its concrete "
    "spellings in the docs run"
)
# (pattern searched in the command, reason); the first that matches decides
CANNOT_RUN = [
    (r"\bmake test\b", "the whole test suite, of which this file is a part"),
    (r"\bmake install\b", "installs into .venv with pip (network, minutes); every command "
                          "here runs the installed .venv"),
    (r"-m benchmarks\.", BENCHMARK),
    (r"--address (?:auto|ray://)", "needs a running Ray cluster (--address auto)"),
    (r"\bvflsweep ui\b|\bmlflow ui\b", "starts a long-running UI (MLflow's server); "
                                        "tests/test_ui.py starts and stops it"),
    (r"localhost:5000|127\.0\.0\.1:5000", "needs a tracking server on :5000"),
    (r"\bmake docs\b", "builds the site into ./site; tests/test_docs.py runs the same "
                       "mkdocs build --strict into a temporary folder"),
]  # fmt: skip
# commands documented to crash or print a traceback: strict xfail, so a fix is noticed
KNOWN_BROKEN: dict[str, str] = {}
# commands run in the checkout itself rather than the temporary folder
IN_CHECKOUT = {"make lint"}


def cannot_run(command: str) -> str | None:
    """Why ``command`` does not run here, or None."""
    for pattern, reason in CANNOT_RUN:
        if re.search(pattern, command):
            return reason
    return TEMPLATE if PLACEHOLDER.search(command) else None


# --- the tiny spaces -------------------------------------------------------------------------

# Every tiny space: two training epochs, at most two seeds. Then per space (dotted key ->
# value; None deletes the key): few cells, still answering the same kind of question.
TINY_ALL: dict[str, Any] = {"base.epochs": 2}
TINY: dict[str, dict[str, Any]] = {
    "smoke": {"grid.seed": [0]},
    "trust": {"grid.dataset": ["breast_cancer"], "grid.partition": ["agg"],
              "defenses": {"gdp": [1.0e-3]}},
    "attacks": {"grid.dataset": ["breast_cancer"], "grid.partition": ["agg"],
                "grid.seed": [0], "attacks": ["ns", "ds"]},
    "trees": {"base.epochs": None, "grid.dataset": ["breast_cancer"],
              "grid.model": ["xgboost", "rf"], "grid.seed": [0]},
    "protocol_gap": {"defenses": None, "attacks": ["dli"]},
    "ssl_defenses": {"base.n_labeled": 100,
                     "base.model_params": {"pretrain_epochs": 1, "ft_lr": 0.01},
                     "grid.dataset": ["adult"],
                     "grid.ssl_variant": ["splitnn", "local_simsiam", "hssl_simsiam"],
                     "grid.aligned_ratio": [0.2], "grid.seed": [0], "defenses": None,
                     "attacks": ["nsb"]},
    "fedbcd_ns": {"defenses": {"gdp": [1.0e-1]}},
    "gdp_ns": {"defenses": {"gdp": [1.0e-1]}},
    "clip_vs_gdp": {"defenses": {"clip_norm": [0.5], "gdp": [1.0e-2]}},
}  # fmt: skip


def space_name(arg: str) -> str:
    """The space a ``SPACE`` argument names: ``search_spaces/smoke.yaml`` -> ``smoke``."""
    return Path(arg).name.removesuffix(".yaml").removesuffix(".yml")


def documented_space(name: str) -> str | None:
    """The text of space ``name``: shipped in search_spaces/, else a docs ```yaml fence."""
    shipped = ROOT / "search_spaces" / f"{name}.yaml"
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    for page in doc_pages():
        for fence in FENCE.finditer(page.read_text(encoding="utf-8")):
            if fence["lang"] in ("yaml", "yml"):
                body = fence["body"]
                if re.search(rf"^name:\s*{re.escape(name)}\s*$", body, re.M):
                    return body
    return None


def tiny_space(name: str) -> str:
    """Space ``name`` shrunk by ``TINY_ALL`` and ``TINY[name]``, as YAML."""
    text = documented_space(name)
    assert text is not None, f"no space {name!r} in search_spaces/ or in a docs ```yaml fence"
    space = yaml.safe_load(text)
    seeds = space.get("grid", {}).get("seed")
    if isinstance(seeds, list):
        space["grid"]["seed"] = seeds[:2]
    for key, value in {**TINY_ALL, **TINY.get(name, {})}.items():
        *path, last = key.split(".")
        node = space
        for part in path:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return yaml.safe_dump(space, sort_keys=False)


# --- running ---------------------------------------------------------------------------------

DRY = re.compile(r"\bvflsweep plan\b|--dry-run|\bvflsweep spaces\b|--help")
RUN = re.compile(r"\bvflsweep run\b|sweep\.py\b|\bmake demo\b")
READS = re.compile(r"\bvflsweep (?:analyze|status|verify)\b|-m analysis\b")


def phase(command: Command) -> int:
    """Dry runs first, then sweeps, then what reads a sweep's folder, then the rest."""
    text = command.text
    return 0 if DRY.search(text) else 1 if RUN.search(text) else 2 if READS.search(text) else 3


def arguments(command: str) -> list[str]:
    """The words after the program (and after ``-m module`` / ``sweep.py``)."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        words.pop(0)
    if Path(words[0]).name.startswith("python"):
        words = words[3:] if words[1:2] == ["-m"] else words[2:]
    else:
        words = words[1:]
    return words


def space_argument(command: str) -> str | None:
    """The ``SPACE`` a plan / run command names, as written."""
    words = arguments(command)
    if "--space" in words:
        return words[words.index("--space") + 1]
    if words[:1] in (["plan"], ["run"]) and len(words) > 1:
        return words[1]
    return None


def sweep_folder(command: str) -> str | None:
    """The ``RESULTS/SWEEP`` an analyze / status / verify command reads, as written."""
    words = [w for w in arguments(command) if not w.startswith("-")]
    if words[:1] and words[0] in ("analyze", "status", "verify"):
        words = words[1:]
    return words[0] if words and "/" in words[0] else None


@dataclass
class Outcome:
    """What one command did."""

    command: str
    returncode: int
    output: str
    seconds: float


class Workspace:
    """The two temporary folders of this session and every command run in them."""

    def __init__(self, base: Path) -> None:
        self.documented = self._folder(base / "documented")  # dry runs: spaces as documented
        (self.documented / "search_spaces").symlink_to(ROOT / "search_spaces")
        self.tiny = self._folder(base / "tiny")  # sweeps and what reads them: tiny spaces
        self.base = base
        self.ran: dict[str, Outcome] = {}
        self.setup: list[Outcome] = []  # the sweeps made for a command that reads one
        self.too_small: list[str] = []  # sweeps refused for want of CPUs (exit 2)
        self.plugin_site: Path | None = None
        self.ray_address: str | None = None  # the shared head's, once started (``start_ray``)
        (self.tiny / "search_spaces").mkdir()
        (self.tiny / "search_spaces" / "smoke.yaml").write_text(tiny_space("smoke"))

    @staticmethod
    def _folder(folder: Path) -> Path:
        folder.mkdir(parents=True)
        for name in (".venv", "sweep.py", "Makefile", "pyproject.toml"):
            (folder / name).symlink_to(ROOT / name)
        return folder

    def start_ray(self) -> Any:
        """One Ray head for every command, with this machine's CPUs (as a command's own
        local Ray would have): each sweep joins it through ``RAY_ADDRESS`` (docs/cli.md:
        ``--address``, or the variable) instead of starting and stopping a Ray of its own,
        ~8 s a sweep. Starting a fresh local Ray is what the other sweep tests do."""
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": os.cpu_count() or 1, "include_dashboard": False},
        )
        self.ray_address = cluster.address
        return cluster

    def env(self, plugin: bool) -> dict[str, str]:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        if self.ray_address is not None and not plugin:
            # a plugin on the command's PYTHONPATH reaches the Ray workers its own local
            # Ray starts, not those of a head started before it (docs/plugins.md: install
            # a plugin on every node of a cluster)
            env["RAY_ADDRESS"] = self.ray_address
        env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.pop("VIRTUAL_ENV", None)
        if plugin:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(self.example_plugin()), env.get("PYTHONPATH", "")) if p
            )
        return env

    def example_plugin(self) -> Path:
        """docs/plugins.md's example defense, built offline and unpacked as an installed
        package (a folder with its .dist-info), so a command finds it through PYTHONPATH."""
        if self.plugin_site is None:
            source = self.base / "plugin-src"
            shutil.copytree(EXAMPLE_PLUGIN, source)
            built = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--no-index", "--quiet", "-w", str(self.base / "wheel"), str(source)],
                capture_output=True, text=True, timeout=TIMEOUT_S,
            )  # fmt: skip
            assert built.returncode == 0, built.stderr[-3000:]
            (wheel,) = (self.base / "wheel").glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(self.base / "plugin-site")
            self.plugin_site = self.base / "plugin-site"
        return self.plugin_site

    def prepare(self, command: str) -> tuple[Path, bool]:
        """The folder ``command`` runs in, with its space written there; whether it needs
        the example plugin on the path."""
        if command in IN_CHECKOUT:
            return ROOT, False
        folder = self.documented if DRY.search(command) else self.tiny
        arg = space_argument(command)
        texts = []
        if arg is not None:
            name, path = space_name(arg), folder / arg
            shipped = (ROOT / "search_spaces" / f"{name}.yaml").is_file()
            if not path.exists() and (folder == self.tiny or not shipped):
                text = tiny_space(name) if folder == self.tiny else documented_space(name)
                assert text is not None, f"{command}: no space {name!r} in the docs"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            texts.append(path.read_text() if path.exists() else documented_space(name) or "")
        sweep = sweep_folder(command)
        if sweep is not None and folder == self.tiny:
            self.ensure_sweep(sweep)
            texts.append(documented_space(Path(sweep).name) or "")
        return folder, any("clip_norm" in t for t in texts)

    def ensure_sweep(self, sweep: str) -> None:
        """``results/<name>`` in the tiny folder holds a finished sweep: where no documented
        ``run`` of that space made it, one ``vflsweep run`` of the tiny space does."""
        if (self.tiny / sweep / "records").is_dir():
            return
        # setup, not a documented command: without MLflow, which only costs time here
        made = self.run(f"vflsweep run {Path(sweep).name}.yaml --no-mlflow")
        self.setup.append(made)
        assert made.returncode == 0 and "Traceback" not in made.output, (
            f"preparing {sweep} for the command failed:\n{made.output[-4000:]}"
        )

    def run(self, command: str) -> Outcome:
        """``command`` as documented (``make`` with its install stamp taken as done)."""
        folder, plugin = self.prepare(command)
        line = re.sub(r"^make ", f"make -o {STAMP} ", command)
        start = time.perf_counter()
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=folder, env=self.env(plugin), capture_output=True, text=True,
            timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return Outcome(
            command, done.returncode, done.stdout + done.stderr, time.perf_counter() - start
        )


def expected_codes(command: str) -> set[int]:
    """The exit codes the docs give ``command``: 0, but for the cases they document."""
    if re.search(r"\|\s*head\b", command):
        # docs/cli.md: a reader that stops early ends the command with 141, as SIGPIPE ends
        # `ls`; whether head stops before the last line is written is timing
        return {0, 141}
    return {0}


# docs/benchmarks.md: a sweep whose trial asks for more CPUs than this machine's Ray has
# (trees: 3 on 2 cores) exits 2 with this refusal; on a bigger machine it runs
CPU_REFUSAL = re.compile(r"needs [\d.]+ CPU \(.*\) but this (?:machine's )?Ray has [\d.]+")


COMMANDS = sorted(collect(), key=phase)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    space = Workspace(tmp_path_factory.mktemp("docs-commands"))
    cluster = space.start_ray()
    try:
        yield space
    finally:
        cluster.shutdown()


def _param(command: Command) -> Any:
    reason = cannot_run(command.text)
    marks: list[Any] = []
    if reason is not None:
        marks.append(pytest.mark.skip(reason=reason))
    elif command.text in KNOWN_BROKEN:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BROKEN[command.text]))
    return pytest.param(command, id=command.text, marks=marks)


@pytest.mark.parametrize("command", [_param(c) for c in COMMANDS])
def test_documented_command_runs(command: Command, workspace: Workspace) -> None:
    """The command ends with its documented exit code and prints no traceback."""
    outcome = workspace.run(command.text)
    workspace.ran[command.text] = outcome
    codes = expected_codes(command.text)
    if RUN.search(command.text) and CPU_REFUSAL.search(outcome.output):
        codes = {2}
        workspace.too_small.append(command.text)
    where = ", ".join(command.where)
    tail = outcome.output[-4000:]
    assert "Traceback" not in outcome.output, f"{command.text} ({where}) printed:\n{tail}"
    assert outcome.returncode in codes, (
        f"{command.text} ({where}) exited {outcome.returncode}, documented {sorted(codes)}:\n{tail}"
    )


# --- the collector itself ---------------------------------------------------------------------


def test_collector_reads_fences_inline_spans_prompts_comments_and_continuations() -> None:
    text = (
        "Run `vflsweep plan smoke` or `vflsweep analyze` (a mention), `ls -l`.\n"
        "```bash\n"
        "make demo    # installs, then runs\n"
        ".venv/bin/python sweep.py --space smoke \\\n"
        "    --dry-run\n"
        "ray start --head\n"
        "```\n"
        "```console\n"
        "$ vflsweep spaces | head -1\n"
        "smoke\n"
        "```\n"
        "```yaml\n"
        "name: `vflsweep run x`\n"
        "```\n"
    )
    spans = [*fenced_commands(text), *inline_commands(text)]
    commands = [(n, c) for n, c in spans if TOOL.match(c)]
    assert sorted(commands) == [
        (1, "vflsweep plan smoke"),
        (3, "make demo"),
        (4, ".venv/bin/python sweep.py --space smoke --dry-run"),
        (9, "vflsweep spaces | head -1"),
    ]


@pytest.mark.parametrize(
    ("written", "runs_as", "skipped"),
    [
        ("vflsweep status RESULTS/SWEEP", "vflsweep status results/smoke", False),
        ("python -m analysis <sweep dir> -q", "python -m analysis results/smoke -q", False),
        ("python sweep.py --space NAME --json", "python sweep.py --space smoke --json", False),
        ("vflsweep plan SPACE [--json]", "vflsweep plan smoke --json", False),
        ("vflsweep ui [--results DIR]", "vflsweep ui --results results", True),
        ("vflsweep run SPACE [--results DIR] [options]", None, True),
        ("vflsweep run …", "vflsweep run …", True),
        ("vflsweep COMMAND --help", "vflsweep COMMAND --help", True),
        ('make install TORCH_SPEC="torch==2.13.0 --index-url <index>"', None, True),
        ("RAY_USAGE_STATS_ENABLED=0 vflsweep plan smoke", None, False),
    ],
)  # fmt: skip
def test_placeholders_are_filled_in_where_clear_else_the_command_is_a_template(
    written: str, runs_as: str | None, skipped: bool
) -> None:
    filled = fill_in(written)
    assert filled == (runs_as or written)
    assert (cannot_run(filled) is not None) == skipped, cannot_run(filled)


def test_documented_benchmarks_exist_with_the_options_the_docs_give_them() -> None:
    """Benchmarks are skipped above (slow); their module and each option the docs pass
    still must exist, so a renamed benchmark or flag is caught without running it."""
    wrong = []
    for command in COMMANDS:
        module = re.search(r"-m benchmarks\.(\w+)", command.text)
        if module is None or cannot_run(command.text) != BENCHMARK:
            continue
        source = ROOT / "benchmarks" / f"{module.group(1)}.py"
        if not source.is_file():
            wrong.append(f"{command.text} ({', '.join(command.where)}): no {source.name}")
            continue
        code = source.read_text(encoding="utf-8")
        for option in re.findall(r"(?<!\S)(--[\w-]+)", command.text):
            if f'"{option}"' not in code and f"'{option}'" not in code:
                wrong.append(f"{command.text} ({', '.join(command.where)}): no {option}")
    assert not wrong, "\n".join(wrong)


# --- the count ------------------------------------------------------------------------------


def test_summary_of_the_documented_commands(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """How many commands the docs hold, how many ran and how many are skipped and why;
    printed to the terminal whether or not pytest captures output (``-s`` or not)."""
    skipped: dict[str, list[str]] = {}
    runnable = []
    for command in COMMANDS:
        reason = cannot_run(command.text)
        if reason is None:
            runnable.append(command.text)
        else:
            skipped.setdefault(reason, []).append(command.text)
    n_skipped = sum(len(v) for v in skipped.values())
    assert COMMANDS, "no tool command found in README.md or docs/*.md"
    assert len(runnable) + n_skipped == len(COMMANDS)
    assert runnable, "every documented command is skipped"
    places = sum(len(c.where) for c in COMMANDS)
    lines = [
        f"docs commands: {len(COMMANDS)} distinct commands collected ({places} places in "
        f"README.md and docs/*.md); {len(runnable)} to run, {len(workspace.ran)} ran in "
        f"this session "
        f"({sum(o.seconds for o in workspace.ran.values()):.0f} s, with "
        f"{len(workspace.setup)} sweeps made for them: "
        f"{sum(o.seconds for o in workspace.setup):.0f} s), {n_skipped} skipped:"
    ]
    for reason, commands in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(commands):3d}  {reason}")
    if workspace.too_small:
        lines.append(
            f"  of those run, {len(workspace.too_small)} refused with exit 2 for want of CPUs "
            f"(docs/benchmarks.md): {', '.join(workspace.too_small)}"
        )
    slowest = sorted(workspace.ran.values(), key=lambda o: -o.seconds)[:5]
    if slowest:
        lines.append("  slowest: " + ", ".join(f"{o.command} {o.seconds:.0f}s" for o in slowest))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
