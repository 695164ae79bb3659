"""FedCVT vs FedSplitNN on the same overlapping rows: adult, credit, mnist halves.

``python -m benchmarks.fedcvt [--seeds 5] [--overlaps 250 500] [--epochs 20]`` prints ONE
JSON object: per dataset and overlap size, mean and std over seeds of test accuracy (and AUC
for the binary datasets) for ``fedcvt`` and ``fedsplitnn`` (same encoders, heads, rows, seed
and optimizer steps), their paired difference, and FedCVT's pseudo-label statistics. Each
finished run goes to stderr and, with ``--runs FILE``, is appended there as one JSON line
(progress survives a kill). Measured: 60 runs in about 6 minutes on one core.

``--ablation`` (binary datasets, default adult and credit) runs, per seed, FedCVT as is,
FedCVT with pseudo-labels off (``t_fed: 1.01``: no softmax reaches it) and FedSplitNN,
and reports each one's accuracy and AUC, the class-1 share of FedCVT's last-epoch
pseudo-labels against its share in A's own rows (computed by the experimenter), and
FedCVT's B-only accuracy: docs/ssl.md's ablation table and diagnosis.

``--balance quota threshold`` (binary datasets, default adult; overlaps as given) runs, per
seed and on the same rows, FedCVT with the paper's pseudo-label rule, FedCVT with each
named ``pseudo_balance``, and FedSplitNN, and prints a markdown table (one row per dataset,
overlap and arm: acc and AUC mean +- std, the paired gain over FedSplitNN with the paired
t-test p (``scipy.stats.ttest_rel``), the class-1 share of the last-epoch pseudo-labels
against A's rows, their count and accuracy, and the std ratio of B's estimates r~_A to the
overlap's r_A), then ONE JSON object with the same cells. ``--rescale`` adds each FedCVT arm
with ``est_rescale: moments`` (estimates matched to the overlap's mean and std).

``--estimates`` (same arms, default adult) measures, as the experimenter who holds every
column, how well B's attention estimates r~_A of its own rows match A's real r_A of them
(R^2, correlation, std ratio) and f_AB's test accuracy fed those estimates instead of A's
real representations (``estimate_quality``). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from trainables.defenses.spec_defenses import SpecDefenses
from trainables.spec import TrialSpec
from trainables.trial import run_trial

DATASETS = ("adult", "credit", "mnist")
VARIANTS = ("fedcvt", "fedsplitnn")


PSEUDO_OFF = {"t_fed": 1.01}  # above any softmax probability: no row is ever pseudo-labeled
ABLATION = (("fedcvt", {}), ("fedcvt_no_pseudo", PSEUDO_OFF), ("fedsplitnn", {}))


def one_run(
    dataset: str, n_aligned: int, variant: str, seed: int, epochs: int,
    model_params: dict | None = None,
) -> dict:  # fmt: skip
    spec = TrialSpec.build(
        dataset=dataset, ssl_variant=variant, n_aligned=n_aligned, seed=seed, epochs=epochs,
        batch_size=256, model_params=dict(model_params or {}),
    )  # fmt: skip
    start = time.perf_counter()
    rec = run_trial(spec)[0]
    extra = json.loads(rec.extra)
    return {
        "dataset": dataset, "n_aligned": n_aligned, "variant": variant, "seed": seed,
        "acc": rec.mp, "auc": extra.get("auc"), "seconds": time.perf_counter() - start,
        **{k: extra.get(k) for k in ("acc_active_only", "pseudo_last_epoch",
                                     "pseudo_last_epoch_acc", "n_local_a",
                                     "pseudo_class_share", "own_a_class_share",
                                     "est_a_std_ratio")},
    }  # fmt: skip


def _ms(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.fmean(values), 4), "std": round(std, 4), "n": len(values)}


def summarize(runs: list[dict]) -> dict:
    """Mean/std per (dataset, overlap, variant) and the paired FedCVT - FedSplitNN gap."""
    out: dict[str, dict] = {}
    for ds in DATASETS:
        for n in sorted({r["n_aligned"] for r in runs}):
            cell = {}
            by = {v: {r["seed"]: r for r in runs if (r["dataset"], r["n_aligned"], r["variant"])
                      == (ds, n, v)} for v in VARIANTS}  # fmt: skip
            if not any(by.values()):
                continue
            for v, rs in by.items():
                cell[v] = {m: _ms([r[m] for r in rs.values() if r[m] is not None])
                           for m in ("acc", "auc")}  # fmt: skip
            paired = sorted(set(by["fedcvt"]) & set(by["fedsplitnn"]))
            for m in ("acc", "auc"):
                diffs = [by["fedcvt"][s][m] - by["fedsplitnn"][s][m] for s in paired
                         if by["fedcvt"][s][m] is not None]  # fmt: skip
                cell[f"gain_{m}"] = _ms(diffs)
            cvt = list(by["fedcvt"].values())
            cell["fedcvt_active_only_acc"] = _ms([r["acc_active_only"] for r in cvt])
            cell["pseudo_last_epoch"] = _ms([r["pseudo_last_epoch"] for r in cvt])
            cell["pseudo_last_epoch_acc"] = _ms(
                [r["pseudo_last_epoch_acc"] for r in cvt if r["pseudo_last_epoch_acc"] is not None]
            )
            out[f"{ds}/{n}"] = cell
    return out


def _class1(share: list[float] | None) -> float | None:
    return None if not share or len(share) != 2 else share[1]


def summarize_ablation(runs: list[dict]) -> dict:
    """Per (dataset, overlap): acc/AUC of each arm, pseudo-label vs A's class-1 share."""
    out: dict[str, dict] = {}
    for ds, n in sorted({(r["dataset"], r["n_aligned"]) for r in runs}):
        cell: dict[str, object] = {}
        for arm, _ in ABLATION:
            rs = [r for r in runs if (r["dataset"], r["n_aligned"], r["arm"]) == (ds, n, arm)]
            cell[arm] = {m: _ms([r[m] for r in rs if r[m] is not None]) for m in ("acc", "auc")}
        cvt = [r for r in runs if (r["dataset"], r["n_aligned"], r["arm"]) == (ds, n, "fedcvt")]
        pseudo = [_class1(r["pseudo_class_share"]) for r in cvt if r["pseudo_last_epoch"]]
        cell["pseudo_class1_share"] = _ms([v for v in pseudo if v is not None])
        cell["own_a_class1_share"] = _ms([_class1(r["own_a_class_share"]) for r in cvt])
        cell["fedcvt_active_only_acc"] = _ms([r["acc_active_only"] for r in cvt])
        out[f"{ds}/{n}"] = cell
    return out


def trained(ds: str, n: int, seed: int, arm: str, params: dict, epochs: int) -> dict:
    """One arm's training: FedSplitNN for the ``fedsplitnn`` arm, else FedCVT with ``params``."""
    variant = "fedsplitnn" if arm == "fedsplitnn" else "fedcvt"
    return one_run(ds, n, variant, seed, epochs, params)


def run_arms(
    args: argparse.Namespace, arms: Sequence[tuple[str, dict]], run: Callable[..., dict]
) -> list[dict]:
    """``run(ds, n, seed, arm, params, epochs)`` for every dataset, overlap, seed and arm, in
    that order (every arm of a seed on the same rows), each logged to ``--runs`` as it ends."""
    runs = []
    for ds in args.datasets:
        for n in args.overlaps:
            for seed in range(args.seeds):
                for arm, params in arms:
                    row = {"arm": arm, **run(ds, n, seed, arm, params, args.epochs)}
                    runs.append(row)
                    _log(row, args.runs)
    return runs


def ablation(args: argparse.Namespace) -> dict:
    runs = run_arms(args, ABLATION, trained)
    return {"ablation": True, "epochs": args.epochs, "batch_size": 256, "n_local": 4000,
            "pseudo_off": PSEUDO_OFF, "seeds": args.seeds,
            "cells": summarize_ablation(runs)}  # fmt: skip


def balance_arms(modes: list[str], rescale: bool = False) -> tuple[tuple[str, dict], ...]:
    """(arm name, model_params): the paper's rule, each balance mode, with ``rescale`` also
    each of those with ``est_rescale: moments``, and the baseline."""
    cvt = [("fedcvt", {}), *((f"fedcvt_{m}", {"pseudo_balance": m}) for m in modes)]
    if rescale:
        cvt += [(f"{arm}_moments", {**mp, "est_rescale": "moments"}) for arm, mp in cvt]
    return (*cvt, ("fedsplitnn", {}))


def _paired(a: dict[int, dict], b: dict[int, dict], m: str) -> dict[str, float | int]:
    """Paired gain a - b over the seeds both have, with the paired t-test p."""
    from scipy.stats import ttest_rel  # lazy: only the balance mode needs it

    seeds = sorted(s for s in set(a) & set(b) if a[s][m] is not None and b[s][m] is not None)
    out = _ms([a[s][m] - b[s][m] for s in seeds])
    if len(seeds) > 1:
        p = float(ttest_rel([a[s][m] for s in seeds], [b[s][m] for s in seeds]).pvalue)
        out["p"] = round(p, 4) if p == p else float("nan")  # nan: identical pairs
    return out


def summarize_balance(runs: list[dict], arms: tuple[tuple[str, dict], ...]) -> dict:
    """Per (dataset, overlap) and arm: acc/AUC, paired gain vs FedSplitNN (+ p), and the
    last-epoch pseudo-labels: class-1 share (vs A's rows), count, accuracy."""
    out: dict[str, dict] = {}
    for ds, n in sorted({(r["dataset"], r["n_aligned"]) for r in runs}):
        here = [r for r in runs if (r["dataset"], r["n_aligned"]) == (ds, n)]
        by = {arm: {r["seed"]: r for r in here if r["arm"] == arm} for arm, _ in arms}
        cell: dict[str, dict] = {}
        for arm, _ in arms:
            rs = list(by[arm].values())
            c: dict[str, object] = {
                m: _ms([r[m] for r in rs if r[m] is not None]) for m in ("acc", "auc")
            }
            if arm != "fedsplitnn":
                c["gain_acc"] = _paired(by[arm], by["fedsplitnn"], "acc")
                c["gain_auc"] = _paired(by[arm], by["fedsplitnn"], "auc")
                c["pseudo_class1_share"] = _ms(
                    [v for r in rs if r["pseudo_last_epoch"]
                     if (v := _class1(r["pseudo_class_share"])) is not None]
                )  # fmt: skip
                c["own_a_class1_share"] = _ms(
                    [v for r in rs if (v := _class1(r["own_a_class_share"])) is not None]
                )
                c["pseudo_last_epoch"] = _ms([r["pseudo_last_epoch"] or 0 for r in rs])
                accs = [r["pseudo_last_epoch_acc"] for r in rs]
                c["pseudo_last_epoch_acc"] = _ms([v for v in accs if v is not None])
                c["est_a_std_ratio"] = _ms([r["est_a_std_ratio"] for r in rs])
            cell[arm] = c
        out[f"{ds}/{n}"] = cell
    return out


def _pm(c: dict, digits: int = 3) -> str:
    return f"{c['mean']:.{digits}f} ± {c['std']:.{digits}f}" if c else "–"


def _gain(c: dict) -> str:
    return f"{c['mean']:+.3f} ± {c['std']:.3f} (p={c.get('p', float('nan')):.3f})" if c else "–"


def balance_table(cells: dict) -> list[str]:
    """docs/ssl.md's markdown table of ``summarize_balance``'s cells."""
    lines = [
        "| dataset | overlap | arm | acc | AUC | gain acc (p) | gain AUC (p) "
        "| pseudo class-1 share | A's class-1 share | pseudo count | pseudo acc "
        "| std r~_A / r_A |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, cell in cells.items():
        ds, n = key.split("/")
        for arm, c in cell.items():
            tail = (
                ["–"] * 7
                if arm == "fedsplitnn"
                else [_gain(c["gain_acc"]), _gain(c["gain_auc"]),
                      _pm(c["pseudo_class1_share"], 2), _pm(c["own_a_class1_share"], 3),
                      _pm(c["pseudo_last_epoch"], 0), _pm(c["pseudo_last_epoch_acc"], 2),
                      _pm(c["est_a_std_ratio"], 2)]
            )  # fmt: skip
            row = [ds, n, arm, _pm(c["acc"]), _pm(c["auc"]), *tail]
            lines.append("| " + " | ".join(row) + " |")
    return lines


def balance(args: argparse.Namespace) -> dict:
    arms = balance_arms(args.balance, args.rescale)
    runs = run_arms(args, arms, trained)
    cells = summarize_balance(runs, arms)
    print("\n".join(balance_table(cells)))
    return {"balance": args.balance, "rescale": args.rescale, "epochs": args.epochs,
            "batch_size": 256, "n_local": 4000, "seeds": args.seeds, "cells": cells}  # fmt: skip


def estimate_quality(
    dataset: str, n_aligned: int, seed: int, epochs: int, params: dict
) -> dict[str, float]:
    """Train FedCVT (in-process) and measure, as the experimenter who holds every column,
    how much of A's real representation of B's own rows B's attention estimate carries.

    Pooled over the 2d dimensions (a dead dimension has no variance to compare): est_r2 =
    1 - sum MSE(r~_A, r_A) / sum Var(r_A) on B's own rows (0: no better than r_A's mean);
    est_corr: correlation of the centred r~_A and r_A; est_std_ratio: sqrt(sum Var(r~_A) /
    sum Var(r_A)) (shrinkage: below 1); acc_est_a: f_AB's test accuracy
    fed [r~_A; r_B] with r~_A estimated from B's test representations (B alone), against
    acc (the real r_A) and acc_active_only (f_B)."""
    import numpy as np

    from trainables.data import Scaler, default_scaler_kind, load_dataset, vertical_split
    from trainables.ssl import runner
    from trainables.ssl.cvt_rounds import CvtRounds
    from trainables.ssl.fedcvt import attention_estimate, match_moments, std_ratio
    from trainables.transport.open import open_parties
    from trainables.transport.placement import LOCAL

    spec = TrialSpec.build(
        dataset=dataset, ssl_variant="fedcvt", n_aligned=n_aligned, seed=seed, epochs=epochs,
        batch_size=256, model_params=dict(params),
    )  # fmt: skip
    ds = load_dataset(dataset)
    opts = runner.cvt_options(spec, True)
    with open_parties(
        runner.party_inits(spec, ds, opts, SpecDefenses.compile(spec)), LOCAL
    ) as group:
        group.train(CvtRounds(semi=True), epochs)
        a, b = group.snapshot()
    rows = runner.choose_rows(spec, ds, opts.n_local)
    cols = vertical_split(ds, 2, spec.split_scheme)[0]  # A's columns
    scaler = Scaler.fit(  # A's own scaler: fit on the rows A holds
        ds.X_train[np.concatenate([rows.overlap, rows.own_a])][:, cols], default_scaler_kind(ds)
    )
    x_a_of_b = torch.from_numpy(scaler.transform(ds.X_train[rows.own_b][:, cols]).astype("f4"))
    with torch.no_grad():
        values, keys = a.encode(a.X_ol)[0], b.encode(b.X_ol)[0]  # (n_ol, 2d) each

        def estimate(x_b: torch.Tensor) -> torch.Tensor:  # B's r~_A of rows x_b: (n, 2d)
            est = attention_estimate(b.encode(x_b)[0], keys, values, opts.temperature)
            return match_moments(est, values) if opts.est_rescale == "moments" else est

        true, est = a.encode(x_a_of_b)[0], estimate(b.X_nl)  # (n_nl_B, 2d) each
        var = true.var(dim=0).sum().clamp(min=1e-12)  # pooled over the 2d dimensions
        r2 = 1 - ((est - true) ** 2).mean(dim=0).sum() / var
        tc, ec = true - true.mean(dim=0), est - est.mean(dim=0)
        corr = (tc * ec).sum() / (tc.norm() * ec.norm()).clamp(min=1e-12)
        r_b = b.encode(b.X_test)[0]
        logits = b.f_ab(torch.cat([estimate(b.X_test), r_b], dim=1))
        acc_est = float((logits.argmax(dim=1) == b.y_test).double().mean())
        b.evaluate(a.test_reps())
    return {
        "dataset": dataset, "n_aligned": n_aligned, "seed": seed, "params": params,
        "est_r2": float(r2), "est_corr": float(corr), "est_std_ratio": std_ratio(est, true),
        "acc": b.metrics["acc"], "acc_est_a": acc_est,
        "acc_active_only": b.metrics["acc_active_only"],
    }  # fmt: skip


def estimates(args: argparse.Namespace) -> dict:
    """``estimate_quality`` per FedCVT arm, overlap and seed; mean +- std per cell."""
    arms = [arm for arm in balance_arms(args.balance or [], args.rescale) if arm[0] != "fedsplitnn"]
    runs = run_arms(args, arms, lambda ds, n, seed, arm, params, epochs: estimate_quality(
        ds, n, seed, epochs, params))  # fmt: skip
    keys = ("est_r2", "est_corr", "est_std_ratio", "acc", "acc_est_a", "acc_active_only")
    cells = {
        f"{ds}/{n}/{arm}": {
            k: _ms([r[k] for r in runs if (r["dataset"], r["n_aligned"], r["arm"]) == (ds, n, arm)])
            for k in keys
        }
        for ds in args.datasets for n in args.overlaps for arm, _ in arms
    }  # fmt: skip
    return {"estimates": True, "epochs": args.epochs, "seeds": args.seeds, "cells": cells}


def _log(run: dict, path: Path | None) -> None:
    if path is not None:
        with path.open("a") as fh:
            fh.write(json.dumps(run) + "\n")
    print(json.dumps(run), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--overlaps", type=int, nargs="+", default=[250, 500])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--runs", type=Path, default=None, help="append each run here (JSONL)")
    parser.add_argument("--ablation", action="store_true", help="pseudo-labels on vs off")
    parser.add_argument(
        "--balance", nargs="+", choices=("quota", "threshold"), default=None,
        help="paper rule vs these pseudo_balance modes vs FedSplitNN (default dataset adult)",
    )  # fmt: skip
    parser.add_argument(
        "--rescale", action="store_true",
        help="with --balance: also each FedCVT arm with est_rescale: moments",
    )  # fmt: skip
    parser.add_argument(
        "--estimates", action="store_true",
        help="quality of B's estimates of r_A of its own rows (arms as --balance/--rescale)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.estimates:
        args.datasets = args.datasets or ["adult"]
        print(json.dumps(estimates(args)))
        return 0
    if args.balance:
        args.datasets = args.datasets or ["adult"]
        print(json.dumps(balance(args)))
        return 0
    if args.ablation:
        args.datasets = args.datasets or ["adult", "credit"]
        print(json.dumps(ablation(args)))
        return 0
    args.datasets = args.datasets or list(DATASETS)
    runs = []
    for ds in args.datasets:
        for n in args.overlaps:
            for seed in range(args.seeds):
                for v in VARIANTS:
                    run = one_run(ds, n, v, seed, args.epochs)
                    runs.append(run)
                    _log(run, args.runs)
    print(json.dumps({"epochs": args.epochs, "batch_size": 256, "n_local": 4000,
                      "metric_note": "acc = test accuracy of f_AB; auc for binary datasets",
                      "cells": summarize(runs)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
