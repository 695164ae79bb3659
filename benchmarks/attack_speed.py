"""``python -m benchmarks.attack_speed``: seconds per attack evaluation, and its AP, on digits.

Why: attack evaluation was 95% of the defense benchmark's compute (issue 17). Each attack
runs on a trial trained with the settings ``benchmarks.defenses`` uses (2-party aggVFL
FedSGD, VFLAIR's digits settings; binary-only attacks on breast_cancer, as
``benchmarks.attacks``); training-time attacks (AMC, LRB) get their own training. The
training happens once per (dataset, seed, training-time attack); each evaluation is then
timed ``--repeats`` times on the same trained parties (median seconds; the AP must repeat).

``--compare 'pmc:stop_patience=2'``: per attack, AP mean ± std over the seeds with the
defaults and with those parameters (a convergence option against the paper's setting).
``--baseline DIR``: the same measurement, in the same run, in a copy of an older tree
(``git archive <rev> | tar -x -C DIR``), interleaved per seed: seconds and AP before/after,
and per attack (``versus_before``) the CPU speed-up and whether the AP mean moved by at most
one std.
``--warmup N``: N untimed evaluations per seed first (one-time costs of a process, such as
torch.func's first call, out of the timing; the baseline's processes get the same).
``--profile``: the top functions by own time, per attack (cProfile), on stderr. Rows
give wall seconds (what a record's ``attack_seconds`` says) and the evaluating thread's
CPU seconds, which a busy shared machine disturbs far less.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.attacks import dataset_of, nn_attacks
from trainables.attacks import ATTACKS
from trainables.attacks.harness import run_attacks
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.vfl.training import prepare_parties, train_local_parties

Setting = tuple[str, dict[str, Any]]  # (attack name, attack params)


def parse_setting(text: str) -> Setting:
    """``pmc:stop_patience=2,epochs=5`` -> ("pmc", {"stop_patience": 2, "epochs": 5})."""
    name, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value  # a bare string: method=supervised, preset=fast
    return name, params


def trained_parties(
    settings: Sequence[Setting], seed: int, defense: str, strength: Any, epochs: int | None
) -> list[Any]:
    """The trained parties ``settings`` read: inference-time attacks of one dataset share a
    training (each attacker keeps its log); a training-time attack (one) gets its own."""
    name, params = settings[0]
    extra: dict[str, Any] = {"epochs": epochs} if epochs else {}
    if defense != "none":
        extra.update(defense=defense, defense_param=strength)
    if ATTACKS.get(name).info.training_time:
        spec = TrialSpec.build(
            dataset=dataset_of(name), seed=seed, train_attack=name, train_attack_params=params,
            **extra,
        )  # fmt: skip
        prepared = prepare_parties(spec, load_dataset(spec.dataset))
    else:
        spec = TrialSpec.build(dataset=dataset_of(name), seed=seed, **extra)
        prepared = prepare_parties(spec, load_dataset(spec.dataset), list(settings))
    return train_local_parties(prepared, int(spec.epochs))[1]  # type: ignore[arg-type]


def evaluate(
    setting: Setting,
    parties: Sequence[Any],
    seed: int,
    repeats: int,
    profile: bool,
    warmup: int = 0,
) -> dict[str, Any]:
    """Median seconds and the AP of ``repeats`` evaluations of one attack on ``parties``
    (after ``warmup`` untimed ones)."""
    for _ in range(warmup):
        run_attacks(parties, [setting], seed)
    seconds, cpu, aps = [], [], []
    prof = cProfile.Profile() if profile else None
    for _ in range(repeats):
        if prof:
            prof.enable()
        start = time.thread_time()  # the attacks run on one thread: CPU time, not the load
        (out,) = run_attacks(parties, [setting], seed)
        cpu.append(time.thread_time() - start)
        if prof:
            prof.disable()
        seconds.append(out.seconds)
        aps.append(out.ap)
    if prof:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
        print(f"--- {setting[0]} seed {seed}\n{text.getvalue()}", file=sys.stderr)
    assert all(a == aps[0] or a != a for a in aps), f"{setting[0]}: AP varies over repeats"
    median = statistics.median
    return {"seconds": median(seconds), "cpu_seconds": median(cpu), "ap": aps[0]}


def measure(
    settings: Sequence[Setting],
    seeds: Sequence[int],
    repeats: int,
    defense: str = "none",
    strength: Any = None,
    epochs: int | None = None,
    profile: bool = False,
    warmup: int = 0,
) -> dict[str, list[dict[str, Any]]]:
    """Per setting label: one {seed, seconds, ap} per seed; a training per (name, seed)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        shared: dict[str, list[Any]] = {}  # one clean training per dataset
        for name, params in settings:
            label = f"{name}:{json.dumps(params, sort_keys=True)}" if params else name
            dataset = dataset_of(name)
            if ATTACKS.get(name).info.training_time:
                parties = trained_parties([(name, params)], seed, defense, strength, epochs)
            else:
                if dataset not in shared:
                    same = [s for s in settings if dataset_of(s[0]) == dataset]
                    clean = [s for s in same if not ATTACKS.get(s[0]).info.training_time]
                    shared[dataset] = trained_parties(clean, seed, defense, strength, epochs)
                parties = shared[dataset]
            row = {
                "seed": seed,
                **evaluate((name, params), parties, seed, repeats, profile, warmup),
            }
            print(json.dumps({"label": label, **row}), file=sys.stderr, flush=True)  # progress
            out.setdefault(label, []).append(row)
    return out


def compared(attacks: dict[str, Any], options: Sequence[str]) -> dict[str, Any]:
    """Per ``--compare`` setting: its AP and seconds beside the defaults' of the same attack,
    and whether the mean AP stayed within one std (of the defaults, over the seeds)."""
    out = {}
    for text in options:
        name, params = parse_setting(text)
        base, opt = attacks[name], attacks[f"{name}:{json.dumps(params, sort_keys=True)}"]
        out[text] = {
            "ap_default": f"{base['ap_mean']:.4f} ± {base['ap_std']:.4f}",
            "ap_option": f"{opt['ap_mean']:.4f} ± {opt['ap_std']:.4f}",
            "ap_within_one_std": (  # None with one seed: no std to compare with
                opt["ap_mean"] >= base["ap_mean"] - base["ap_std"] if len(base["ap"]) > 1 else None
            ),
            "seconds": [base["seconds_median"], opt["seconds_median"]],
            "cpu_seconds": [base.get("cpu_seconds_median"), opt.get("cpu_seconds_median")],
        }
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    aps = [r["ap"] for r in rows]
    return {
        "seconds_median": round(statistics.median(r["seconds"] for r in rows), 3),
        "cpu_seconds_median": round(statistics.median(r.get("cpu_seconds", 0) for r in rows), 3),
        "ap_mean": round(statistics.fmean(aps), 4),
        "ap_std": round(statistics.stdev(aps), 4) if len(aps) > 1 else 0.0,
        "ap": [round(a, 4) for a in aps],
    }


def versus_before(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Per attack run in both trees: CPU seconds before/after, the speed-up, AP mean ± std
    before/after, and whether the means differ by at most the std before (issue 17's rule:
    "same AP within one std over the seeds")."""
    out = {}
    for label in sorted(set(now) & set(before)):
        a, b = before[label], now[label]
        cpu = [a["cpu_seconds_median"], b["cpu_seconds_median"]]
        out[label] = {
            "cpu_seconds": cpu,
            "speedup": round(cpu[0] / cpu[1], 2) if cpu[1] else None,
            "ap": [
                f"{a['ap_mean']:.4f} ± {a['ap_std']:.4f}",
                f"{b['ap_mean']:.4f} ± {b['ap_std']:.4f}",
            ],
            "ap_within_one_std": abs(b["ap_mean"] - a["ap_mean"]) <= a["ap_std"] + 1e-12,
        }
    return out


def baseline_rows(tree: str, argv: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The raw rows of this benchmark, run in ``tree`` (an older copy of the repository)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": f"{tree}:{here}"}  # the old trainables, this script
    cmd = [sys.executable, os.path.join(here, "benchmarks", "attack_speed.py"), "--raw", *argv]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attacks", default=",".join(nn_attacks()), help="comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None, help="default: VFLAIR's (30)")
    parser.add_argument("--defense", default="none")
    parser.add_argument("--strength", type=float, default=None)
    parser.add_argument("--compare", action="append", default=[], help="name:key=value,...")
    parser.add_argument("--baseline", default=None, help="an older tree to measure alongside")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--warmup", type=int, default=0, help="untimed evaluations per seed")
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [n for n in args.attacks.split(",") if n]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    settings = [(n, {}) for n in names] + [parse_setting(c) for c in args.compare]
    common = dict(
        defense=args.defense, strength=args.strength, epochs=args.epochs, profile=args.profile
    )
    rows: dict[str, list[dict[str, Any]]] = {}
    before: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:  # interleaved with the baseline, so both see the same machine load
        if args.baseline:
            pass_on = ["--attacks", ",".join(names), "--seeds", str(seed)]
            pass_on += ["--repeats", str(args.repeats), "--defense", args.defense]
            pass_on += [] if args.strength is None else ["--strength", str(args.strength)]
            pass_on += [] if args.epochs is None else ["--epochs", str(args.epochs)]
            pass_on += ["--warmup", str(args.warmup)] if args.warmup else []
            for label, got in baseline_rows(args.baseline, pass_on).items():
                before.setdefault(label, []).extend(got)
        got_rows = measure(settings, [seed], args.repeats, warmup=args.warmup, **common)
        for label, got in got_rows.items():
            rows.setdefault(label, []).extend(got)
    if args.raw:
        print(json.dumps(rows))
        return
    result: dict[str, Any] = {"benchmark": "attack_speed", "seeds": seeds, **common}
    result["warmup"] = args.warmup
    result["attacks"] = {label: summary(r) for label, r in rows.items()}
    if args.compare:
        result["compare"] = compared(result["attacks"], args.compare)
    if before:
        result["before"] = {label: summary(r) for label, r in before.items()}
        result["versus_before"] = versus_before(result["attacks"], result["before"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
