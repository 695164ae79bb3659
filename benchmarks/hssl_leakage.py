"""``python -m benchmarks.hssl_leakage``: FedHSSL's leakage and CAP tables, recomputed here.

The paper (``shared/papers/fedhssl_hybrid_ssl_vfl.txt``) reports two privacy findings:

- **Table VI**, label leakage of pretraining: model completion (MC, 80 auxiliary labels)
  on the passive party's *pretrained* encoder, FedHSSL-SimSiam (``A_FedHSSL``) against
  the adversary's prior, the party's own SimSiam (``A_SimSiam``), without ISO and with
  FedHSSL's pretraining ISO at λp (its cross-party representations and shared local top
  encoder: our ``iso`` with ``lambda_p``, λ = 0 in fine-tuning), and FedHSSL's MP.
- **Table VII**, privacy-utility under ISO in fine-tuning: per variant (FedSplitNN,
  FedLocalSimSiam, FedHSSL-SimSiam) ISO on the fine-tuning gradients at λf, MC on the
  fine-tuned encoder, summarized by CAP (``analysis/cap.py``).

This runs, per dataset, one sweep for Table VII and the undefended rows of Table VI
(``ssl_variant`` splitnn / local_simsiam / hssl_simsiam × ISO λf {1, 5, 25} + none × MC)
and one per λp (hssl_simsiam × ISO λ = 0 with ``lambda_p``), at ``ssl_iso.yaml``'s settings
(2 parties, 20 % aligned, 200 labels, 10 pretraining iterations, 30 fine-tuning epochs), 3
seeds. Every number comes with its 95 % interval over seeds (t); the differences
FedHSSL − SimSiam are paired by seed, and CAP's contrast hssl_simsiam − local_simsiam is the
analysis' own (``--compare ssl_variant=local_simsiam:hssl_simsiam``, CAP rows). AP is MC's
label-recovery accuracy, as the paper reports it; the advantage over MC's no-information
baseline is beside it.

``--datasets`` (default mnist, the issue's), ``--lambda-p`` (default 0.1 and 0.4, the
paper's values), ``--seeds`` (3), ``--results DIR`` (kept and resumed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from analysis.cap import cap_table
from analysis.compare import parse_compare
from analysis.contrast import contrasts
from analysis.load import read_records
from analysis.report import prepare
from benchmarks import run_space, seed_interval

BASE = {
    "n_parties": 2,
    "epochs": 30,
    "batch_size": 512,
    "aligned_ratio": 0.2,
    "n_labeled": 200,
    "model_params": {"pretrain_epochs": 10},
}  # fmt: skip  (ssl_iso.yaml's)
LAMBDA_F = [1.0, 5.0, 25.0]
VARIANTS = ["splitnn", "local_simsiam", "hssl_simsiam"]


def write_space(folder: Path, name: str, dataset: str, seeds: int, variants: list[str],
                iso: dict[str, object]) -> str:  # fmt: skip
    space = {
        "name": name,
        "base": {**BASE, "dataset": dataset},
        "grid": {"ssl_variant": variants, "seed": list(range(seeds))},
        "defenses": {"iso": iso},
        "attacks": ["mc"],
        "resources": {"cpu_per_party": 1, "cpu_per_trial": 0},
        "run": {"transport": "ray", "reuse_actors": True},
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path)


def interval(values: pd.Series) -> dict[str, object]:
    """Mean over seeds, their count and the 95 % interval (``seed_interval``: none below
    three seeds)."""
    mean, ci = seed_interval(values.to_numpy(dtype=float))
    out: dict[str, object] = {"mean": mean, "n": int(values.notna().sum())}
    if ci is not None:
        out["ci95"] = ci
    return out


def per_seed(records: pd.DataFrame, variant: str, defense: str, attack: str, col: str) -> pd.Series:
    rows = records[(records["ssl_variant"] == variant) & (records["defense"] == defense)
                   & (records["attack"] == attack) & (records["status"] == "ok")]  # fmt: skip
    return rows.groupby("seed")[col].mean()


def table_vi(main: pd.DataFrame, by_lp: dict[float, pd.DataFrame]) -> dict[str, object]:
    """A_SimSiam, A_FedHSSL w/o ISO and w/ ISO at each λp, FedHSSL's MP; paired gaps."""
    prior = per_seed(main, "local_simsiam", "none", "mc_pretrained", "ap")
    fed = per_seed(main, "hssl_simsiam", "none", "mc_pretrained", "ap")
    out: dict[str, object] = {
        "A_SimSiam_ap": interval(prior),
        "A_FedHSSL_ap": interval(fed),
        "A_FedHSSL_minus_A_SimSiam": interval(fed - prior),
        "A_FedHSSL_adv": interval(
            per_seed(main, "hssl_simsiam", "none", "mc_pretrained", "ap_advantage")
        ),
        "main_mp": interval(per_seed(main, "hssl_simsiam", "none", "none", "mp")),
    }
    for lam_p, records in by_lp.items():
        noised = per_seed(records, "hssl_simsiam", "iso", "mc_pretrained", "ap")
        out[f"lambda_p={lam_p:g}"] = {
            "A_FedHSSL_ap": interval(noised),
            "A_FedHSSL_minus_A_SimSiam": interval(noised - prior),
            "effect_on_A_FedHSSL": interval(noised - fed),
            "main_mp": interval(per_seed(records, "hssl_simsiam", "iso", "none", "mp")),
        }
    return out


def table_vii(main: pd.DataFrame) -> dict[str, object]:
    """Per variant: CAP over λf with MC on the fine-tuned encoder (per seed, then t), and
    the analysis' CAP contrast hssl_simsiam − local_simsiam (with MC on both stages)."""
    dcs = prepare(main, 0.5)
    caps = cap_table(dcs[(dcs["defense"] == "iso") | (dcs["attack"] == "none")])
    caps = caps[caps["attack"] == "mc"].set_index("scenario")  # MC on the fine-tuned encoder
    out: dict[str, object] = {}
    for variant in VARIANTS:
        rows = main[(main["ssl_variant"] == variant) & (main["status"] == "ok")]
        clean = rows[rows["attack"] == "none"].set_index("trial_id")["mp"]
        mc = rows[(rows["attack"] == "mc") & (rows["defense"] == "iso")]
        row = caps.loc[f"ssl_variant={variant}"]
        cap = {"mean": round(float(row["cap"]), 4), "n": int(row["n_seeds"])}
        if pd.notna(row["cap_lo"]):
            cap["ci95"] = [round(float(row["cap_lo"]), 4), round(float(row["cap_hi"]), 4)]
        by_lam = {f"{lam:g}": mc[mc["defense_param"] == lam].groupby("seed") for lam in LAMBDA_F}
        out[variant] = {
            "cap": cap,  # cap.csv's CAP of (variant, iso, mc): U·E over λf, t over seeds
            "mp_by_lambda_f": {k: interval(g["trial_id"].first().map(clean))
                               for k, g in by_lam.items()},
            "mc_ap_by_lambda_f": {k: interval(g["ap"].mean()) for k, g in by_lam.items()},
        }  # fmt: skip
    found = contrasts(dcs, parse_compare("ssl_variant=local_simsiam:hssl_simsiam"))
    cap = found.table[found.table["metric"] == "cap"]
    out["cap_contrast_hssl_minus_local"] = [
        {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
        for row in cap[["kind", "defense", "n", "mean_a", "mean_b", "delta", "lo", "hi", "p_holm",
                        "verdict", "not_a_baseline"]].to_dict("records")
    ]  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["mnist"])
    parser.add_argument("--lambda-p", nargs="+", type=float, default=[0.1, 0.4])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    results = args.results or Path(tempfile.gettempdir()) / "vflsweep_hssl_leakage"
    start = time.perf_counter()
    out: dict[str, object] = {"benchmark": "hssl_leakage", "results": str(results),
                              "seeds": args.seeds, "settings": BASE}  # fmt: skip
    seconds: dict[str, float] = {}
    for dataset in args.datasets:
        name = f"hssl_leak_{dataset}"
        space = write_space(results, name, dataset, args.seeds, VARIANTS,
                            {"strengths": LAMBDA_F, "params": {"target": "gradient"}})  # fmt: skip
        seconds[name] = round(run_space(space, results), 1)
        main_rows = read_records(results / name)
        by_lp = {}
        for lam_p in args.lambda_p:
            lp_name = f"{name}_lp{lam_p:g}".replace(".", "_")
            space = write_space(results, lp_name, dataset, args.seeds, ["hssl_simsiam"],
                                {"strengths": [0.0], "params": {"lambda_p": lam_p}})  # fmt: skip
            seconds[lp_name] = round(run_space(space, results), 1)
            by_lp[lam_p] = read_records(results / lp_name)
        out[dataset] = {"table_vi": table_vi(main_rows, by_lp), "table_vii": table_vii(main_rows)}
    out["sweep_seconds"] = seconds
    out["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
