"""``vflsweep``: the installed command, one subcommand per step from a question to its answer.

Why a console script: a user of the wheel has no ``sweep.py`` or ``search_spaces/`` beside
them; ``pip install .`` puts ``vflsweep`` on the PATH and the shipped spaces in the package.
Each subcommand hands its arguments to the module that owns the step, so ``python sweep.py``
and ``python -m analysis`` stay exact equivalents (same options, same exit codes)::

    vflsweep run SPACE [sweep options]      = python sweep.py --space SPACE ...
    vflsweep plan SPACE [--json ...]        = python sweep.py --space SPACE --dry-run ...
    vflsweep analyze RESULTS/SWEEP [...]    = python -m analysis RESULTS/SWEEP ...
    vflsweep status RESULTS/SWEEP [--json]  what a running or finished sweep has done
    vflsweep verify RESULTS/SWEEP [--json]  check every record file's checksums
    vflsweep ui [--results DIR]             MLflow's UI on 127.0.0.1
    vflsweep spaces                         the shipped spaces and where they are

Imports are deferred to the chosen subcommand: ``vflsweep --help`` answers at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

USAGE = """usage: vflsweep COMMAND [ARGS]

  run SPACE [options]       run a sweep (SPACE: a YAML file or a shipped space's name)
  plan SPACE [options]      print the plan and its wall-time estimate; run nothing
  analyze SWEEP [options]   the answer tables, figures and report of RESULTS/SWEEP
  status SWEEP [--json]     done / running / failed / left and an ETA of RESULTS/SWEEP
  verify SWEEP [--json]     check every record file of RESULTS/SWEEP; exit 3 if one is damaged
  ui [--results DIR]        start MLflow's UI on 127.0.0.1 for DIR (default ./results)
  spaces                    list the shipped spaces

'vflsweep COMMAND --help' shows a command's options."""


# ``run`` and ``plan`` share sweep.py's parser (same options); their --help says what each does.
SWEEP_HELP = {
    "run": "Run a sweep: every training of SPACE not recorded yet, each party in its own Ray "
    "actor, records into RESULTS/NAME/records; re-running resumes an interrupted sweep. "
    "'vflsweep plan SPACE' shows what would run, without running it.",
    "plan": "Dry run: expand SPACE into its trainings and print the plan (trainings, attack "
    "evaluations, dropped cells, resources per trial) and a wall-time estimate, without "
    "running anything (--dry-run is implied). 'vflsweep run SPACE' runs it.",
}


def _run(argv: list[str]) -> int:
    from sweep_engine.cli import main

    if _asks_help(argv):
        return _sweep_help("run")
    return main(_with_space(argv, "run"), prog="vflsweep run")


def _plan(argv: list[str]) -> int:
    from sweep_engine.cli import main

    if _asks_help(argv):
        return _sweep_help("plan")
    return main([*_with_space(argv, "plan"), "--dry-run"], prog="vflsweep plan")


def _asks_help(argv: list[str]) -> bool:
    """``-h``/``--help`` anywhere, as argparse reads it (``vflsweep plan smoke --help``)."""
    return any(a in ("-h", "--help") for a in argv)


def _sweep_help(command: str) -> int:
    """sweep.py's options under ``vflsweep COMMAND``, with that command's own description:
    the parser's own ("Run a sweep of VFL trials.") was wrong for ``plan``."""
    from sweep_engine.cli import build_parser

    parser = build_parser(f"vflsweep {command}")
    parser.description = SWEEP_HELP[command]
    parser.usage = "%(prog)s SPACE [options]"  # its --space, required there, is optional here
    parser.print_help()
    return 0


def _with_space(argv: list[str], command: str) -> list[str]:
    """``SPACE`` first (positional), else ``--space SPACE`` as sweep.py takes it."""
    if argv and not argv[0].startswith("-"):
        return ["--space", argv[0], *argv[1:]]
    if "--space" in argv or any(a.startswith("--space=") for a in argv):
        return argv
    print(f"usage: vflsweep {command} SPACE [options]  (see vflsweep {command} --help)")
    raise SystemExit(2)


def _analyze(argv: list[str]) -> int:
    """``python -m analysis`` under its own name: its usage and errors say ``vflsweep
    analyze``, the command the user typed."""
    from analysis.cli import main

    return main(argv, prog="vflsweep analyze")


def _status(argv: list[str]) -> int:
    from sweep_engine.status import main

    return main(argv)


def _verify(argv: list[str]) -> int:
    from sweep_engine.verify import main

    return main(argv)


def _ui(argv: list[str]) -> int:
    from sweep_engine.ui import main

    return main(argv)


SPACES_HELP = (
    "List the spaces shipped with vflsweep, a line each: its name (what 'vflsweep plan NAME' "
    "and 'vflsweep run NAME' take) and what it asks; then the folder they are in. No options."
)


def _spaces(argv: list[str]) -> int:
    """``vflsweep spaces``: its ``--help`` answers like every other command's (exit 0)."""
    import textwrap

    import yaml

    from sweep_engine.space import SPACES_DIR

    if argv in (["-h"], ["--help"]):
        print(f"usage: vflsweep spaces\n\n{SPACES_HELP}")
        return 0
    if argv:
        print("usage: vflsweep spaces  (no options)", file=sys.stderr)
        return 2
    for path in sorted(SPACES_DIR.glob("*.yaml")):
        about = " ".join(str(yaml.safe_load(path.read_text()).get("description", "")).split())
        print(f"{path.stem:<15} {textwrap.shorten(about, 84, placeholder=' ...')}")
    print(f"(in {SPACES_DIR}; 'vflsweep plan NAME' shows one's trainings and wall time)")
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": _run,
    "plan": _plan,
    "analyze": _analyze,
    "status": _status,
    "verify": _verify,
    "ui": _ui,
    "spaces": _spaces,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        from difflib import get_close_matches

        close = get_close_matches(args[0], list(COMMANDS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        print(f"vflsweep: unknown command '{args[0]}'{hint}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return command(args[1:])
    except SystemExit as stop:  # argparse's --help (0) and usage errors (2)
        return stop.code if isinstance(stop.code, int) else 2


# What a shell reports for a command SIGPIPE ended (``ls | head -1``): 128 + SIGPIPE.
BROKEN_PIPE_EXIT = 141


def console() -> None:
    """The ``vflsweep`` console script: ``main``, then a quick exit (``process_exit.exit_process``).

    A reader that stops early (``vflsweep spaces | head -1``) closes our stdout: Python
    ignores SIGPIPE and raises ``BrokenPipeError`` instead, whose traceback told the user
    of a failure where there was none. Every subcommand ends quietly there, as ``ls``
    does; its ``finally`` blocks (a sweep's lock, the UI's server) still run on the way."""
    from sweep_engine.process_exit import exit_process  # not cli: it imports torch

    try:
        code = main()
        sys.stdout.flush()  # a reader gone: found here, not in ``exit_process``'s silent flush
    except BrokenPipeError:
        code = quiet_stdout()
    exit_process(code)


def quiet_stdout() -> int:
    """Point stdout at /dev/null, so that flushing what is left in its buffer (at exit)
    cannot raise again; returns the exit code for a closed stdout."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor behind stdout: nothing to mute
        pass
    finally:
        os.close(devnull)
    return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    console()
