"""``python -m benchmarks.hssl``: FedSplitNN / FedLocal / FedCSSL / FedGSSL / FedHSSL at
200 labels and 20 % / 40 % aligned rows (FedHSSL Table IV / X setting), 2 or 4 parties.

Why this shape: the paper's claim is an ordering on the *same* rows (FedHSSL > FedLocal >
FedSplitNN), so every variant of a (setting, seed) sees the same aligned, labeled and test
rows, and the comparison is paired: per seed differences, mean ± std, paired t-test p
(``scipy.stats.ttest_rel``). The steps of Algorithm 1 are the ablation: cross-party SSL
(cssl − splitnn), guided local SSL (gssl − cssl), partial model aggregation (hssl − gssl).

Each variant is pretrained once per (setting, seed) and then fine-tuned under every
``--ft`` protocol: ``pick:full`` is the paper's (lr picked from {0.005, 0.01, 0.03} on a
validation split of the labeled rows, whole encoder fine-tuned), ``<lr>:full`` a fixed lr
for every variant, ``<lr>:probe`` the frozen encoder with a linear head (``model_params``
ft_lr / ft_mode of the ``hssl`` kind). The paper protocol's MP is the record's MP of
``run_trial`` on the same spec (tests/test_hssl.py checks it). Parties run in-process
(``local`` placement: the same party code as the Ray actors). Every finished row is
appended to ``--progress`` (JSONL) as it ends; ``--summarize FILES`` rebuilds the tables
(``--markdown``: docs/ssl.md's tables).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

import numpy as np
import torch

from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.ssl.hssl.finetune import finetune
from trainables.ssl.hssl.parties import SSLParty
from trainables.ssl.hssl.trial import pretrained
from trainables.ssl.hssl.variants import FAMILIES, options, parse_variant, prepare
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL

STUDY = "splitnn,local_simsiam,cssl_simsiam,gssl_simsiam,hssl_simsiam"
# (name, minuend, subtrahend) per SSL method m: the paper's ordering, then Algorithm 1's steps
PAIRS = (
    ("hssl-local", "hssl_{m}", "local_{m}"),
    ("local-splitnn", "local_{m}", "splitnn"),
    ("hssl-splitnn", "hssl_{m}", "splitnn"),
    ("cssl-splitnn", "cssl_{m}", "splitnn"),
    ("cssl-local", "cssl_{m}", "local_{m}"),
    ("gssl-cssl", "gssl_{m}", "cssl_{m}"),
    ("hssl-gssl", "hssl_{m}", "gssl_{m}"),
)


def ft_params(label: str) -> dict[str, Any]:
    """``pick:full`` / ``0.01:probe`` -> the spec's ft_* model_params."""
    lr, _, mode = label.partition(":")
    out: dict[str, Any] = {"ft_mode": mode or "full"}
    if lr != "pick":
        out["ft_lr"] = float(lr)
    return out


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "n_labeled": args.labels,
        "ft_epochs": args.ft_epochs,
        "ft_batch": args.ft_batch,
        "ft": args.ft.split(","),
        "model_params": {
            "pretrain_epochs": args.pretrain_epochs,
            "proj": args.proj,
            "hidden": args.hidden,
            "emb": args.emb,
            "pred": args.pred,
            "moco_dim": min(128, args.proj),
            **({"image_aug": args.image_aug} if args.image_aug else {}),
        },
    }


def spec_of(dataset: str, k: int, aligned: float, variant: str, seed: int, s: dict[str, Any],
            ft: str) -> TrialSpec:  # fmt: skip
    extra = {} if s["ft_batch"] is None else {"batch_size": s["ft_batch"]}
    return TrialSpec.build(
        dataset=dataset, ssl_variant=variant, n_parties=k, aligned_ratio=aligned,
        n_labeled=s["n_labeled"], epochs=s["ft_epochs"], seed=seed,
        model_params={**s["model_params"], **ft_params(ft)}, **extra,
    )  # fmt: skip


def rep_std(encoder: torch.nn.Module, X: np.ndarray) -> float:
    """Mean over output dimensions of the representation's std on (up to 1,000) test rows:
    near 0 is a collapsed encoder."""
    with torch.no_grad():
        h = encoder(torch.as_tensor(X[:1000], dtype=torch.float32))  # (N, emb * towers)
    return round(float(h.std(dim=0).mean()), 4)


def one(dataset: str, k: int, aligned: float, variant: str, seed: int,
        s: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """Pretrain ``variant`` once, fine-tune it under every protocol of ``s["ft"]``."""
    specs = [spec_of(dataset, k, aligned, variant, seed, s, ft) for ft in s["ft"]]
    data = prepare(specs[0], load_dataset(dataset))
    start = time.perf_counter()
    with open_parties(data.inits, LOCAL) as group:
        pre = pretrained(group, parse_variant(variant), options(specs[0]), data, LOCAL, seed)
        encoders = group.call_all(SSLParty.pretrained_encoder)
        std = rep_std(encoders[-1], data.X_test[-1])
        rows = []
        for label, spec in zip(s["ft"], specs, strict=True):
            t = time.perf_counter()
            ft = finetune(spec, data, encoders, group, LOCAL, ())
            took = round(time.perf_counter() - t, 2)
            rows.append({"dataset": dataset, "parties": k, "aligned": aligned, "ft": label,
                         "variant": variant, "seed": seed, "mp": ft.final.result.mp,
                         "ft_lr": ft.lr, "ft_seconds": took})  # fmt: skip
    for row in rows:
        row.update(pretrain_seconds=round(pre.train_seconds, 2), rep_std_active=std,
                   seconds=round(time.perf_counter() - start, 2))  # fmt: skip
    return rows


def setting_key(r: dict[str, Any]) -> str:
    return f"{r['dataset']} k={r['parties']} aligned={r['aligned']} ft={r['ft']}"


def mean_std(values: list[float]) -> dict[str, Any]:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.mean(values), 4), "std": round(std, 4), "n": len(values)}


def paired(a: dict[int, float], b: dict[int, float]) -> dict[str, Any] | None:
    """a − b over the seeds both have: mean ± std of the differences, paired t-test p."""
    from scipy.stats import ttest_rel

    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    out = mean_std(diffs)
    p = float(ttest_rel(diffs, [0.0] * len(diffs)).pvalue) if len(seeds) > 1 else np.nan
    out["p"] = round(p, 4) if np.isfinite(p) else None  # nan: < 2 seeds or all diffs equal
    return out


def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per setting: mean ± std per variant, and the paired differences."""
    by: dict[str, dict[str, dict[int, float]]] = {}
    where: dict[str, dict[str, Any]] = {}
    for r in rows:
        by.setdefault(setting_key(r), {}).setdefault(r["variant"], {})[r["seed"]] = r["mp"]
        where[setting_key(r)] = {k: r[k] for k in ("dataset", "parties", "aligned", "ft")}
    out: dict[str, Any] = {}
    for key, per in by.items():
        methods = sorted({v.partition("_")[2] for v in per if "_" in v})
        diffs = {}
        for (name, hi, lo), m in itertools.product(PAIRS, methods):
            a, b = per.get(hi.format(m=m)), per.get(lo.format(m=m))
            d = paired(a, b) if a and b else None
            if d is not None:
                diffs[f"{name} ({m})"] = d
        variants = {v: mean_std(list(s.values())) for v, s in per.items()}
        out[key] = {**where[key], "variants": variants, "paired": diffs}
    return out


def markdown(tab: dict[str, Any]) -> str:
    """Per (dataset, ft protocol): a variant table and a paired-difference table, one
    column per (parties, aligned) setting."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for t in tab.values():
        col = f"k={t['parties']}, {round(100 * t['aligned'])} % aligned"
        groups.setdefault((t["dataset"], t["ft"]), {})[col] = t
    lines = []
    for (dataset, ft), cols in groups.items():
        head = f"| {dataset}, ft {ft} | " + " | ".join(cols) + " |"
        rule = "|---|" + "---|" * len(cols)
        variants = sorted({v for t in cols.values() for v in t["variants"]},
                          key=lambda v: _order((v, None)))  # fmt: skip
        lines += [head, rule]
        for v in variants:
            cells = [_cell(t["variants"].get(v)) for t in cols.values()]
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
        lines += ["", head.replace(f"| {dataset},", "| paired, p (t-test):", 1), rule]
        names = list(dict.fromkeys(n for t in cols.values() for n in t["paired"]))
        for n in names:
            cells = [_cell(t["paired"].get(n), signed=True) for t in cols.values()]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _cell(d: dict[str, Any] | None, signed: bool = False) -> str:
    if d is None:
        return "–"
    text = f"{d['mean']:+.3f}" if signed else f"{d['mean']:.3f}"
    text += f" ± {d['std']:.3f} (n={d['n']})"
    if signed:
        p = d["p"]
        text += " p n/a" if p is None else (" p<0.001" if p < 0.001 else f" p={p:.3f}")
    return text


def _order(item: tuple[str, Any]) -> tuple[int, str]:
    """splitnn, then local / cssl / gssl / hssl (Algorithm 1's order)."""
    family = item[0].partition("_")[0]
    return (0 if family == "splitnn" else 1 + list(FAMILIES).index(family), item[0])


def from_progress(paths: list[str]) -> dict[str, Any]:
    """The tables of every row appended to the given progress files."""
    rows = [json.loads(line) for path in paths for line in open(path) if line.strip()]
    return {"table": table(rows), "rows": len(rows)}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--datasets", default="mnist")
    p.add_argument("--parties", default="2", help="comma list: 2 (mnist halves), 4 (quarters)")
    p.add_argument("--aligned", default="0.2", help="comma list of aligned ratios")
    p.add_argument("--labels", type=int, default=200)
    p.add_argument("--variants", default=STUDY)
    p.add_argument("--ft", default="pick:full", help="comma list of lr:mode (lr: pick | float)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seed-start", type=int, default=0, help="first seed (split runs)")
    p.add_argument("--pretrain-epochs", type=int, default=10)
    p.add_argument("--ft-epochs", type=int, default=30)
    p.add_argument("--ft-batch", type=int, default=None, help="default: the dataset's")
    p.add_argument("--proj", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--emb", type=int, default=64)
    p.add_argument("--pred", type=int, default=128)
    p.add_argument("--image-aug", default="", help="light | strong (default: the kind's)")
    p.add_argument("--progress", default="")
    p.add_argument("--summarize", nargs="*", help="only print the tables of progress files")
    p.add_argument("--markdown", action="store_true", help="with --summarize: markdown")
    return p.parse_args()


def main() -> None:
    torch.set_num_threads(1)
    args = parse()
    if args.summarize:
        out = from_progress(args.summarize)
        print(markdown(out["table"]) if args.markdown else json.dumps(out))
        return
    s = settings(args)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    grid = itertools.product(seeds, args.datasets.split(","),
                             [int(k) for k in args.parties.split(",")],
                             [float(a) for a in args.aligned.split(",")])  # fmt: skip
    for seed, dataset, k, aligned in grid:  # seed-major: a cut-short run has every setting
        for variant in args.variants.split(","):
            new = one(dataset, k, aligned, variant, seed, s)
            rows += new
            if args.progress:
                with open(args.progress, "a") as f:
                    f.writelines(json.dumps(r) + "\n" for r in new)
    print(json.dumps({"benchmark": "hssl", "settings": s, "seeds": seeds,
                      "seconds": round(time.perf_counter() - start, 1), "table": table(rows),
                      "rows": rows}))  # fmt: skip


if __name__ == "__main__":
    main()
