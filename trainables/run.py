"""``python -m trainables.run``: one VFL trial from the command line, one JSON line out.

Example::

    python -m trainables.run --dataset breast_cancer --partition agg --protocol fedsgd \
        --transport ray --seed 0

Bad input exits with code 2 and a message naming the value and what is allowed.
"""

from __future__ import annotations

import argparse
import json
import sys

from trainables.defenses.applied import DefenseNeverApplied
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainables.run", description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="breast_cancer")
    p.add_argument("--parties", type=int, default=2, help="number of parties K (>= 2)")
    p.add_argument("--split-scheme", default="auto", help="auto, blocks, halves, quarters")
    p.add_argument("--partition", default="agg", help="agg (aggVFL) or split (splitVFL)")
    p.add_argument("--model", default=None, help="lr, mlp2, mlp3, mlp4 (default: per dataset)")
    p.add_argument("--hidden", default=None, help="comma-separated hidden widths, e.g. 64,32")
    p.add_argument("--protocol", default="fedsgd", help="fedsgd or fedbcd")
    p.add_argument("--q", type=int, default=None, help="FedBCD local steps (default 5)")
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--aligned-ratio", type=float, default=1.0)
    p.add_argument("--n-labeled", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--transport", default="local", help="local or ray")
    p.add_argument("--address", default=None, help="Ray address (auto, ray://host:10001)")
    p.add_argument("--cpu-per-party", type=float, default=1.0)
    p.add_argument("--gpu-per-party", type=float, default=0.0)
    p.add_argument("--data-dir", default=None, help="folder with dataset files (env VFLSWEEP_DATA)")
    return p


def spec_from_args(args: argparse.Namespace) -> TrialSpec:
    hidden = None
    if args.hidden:
        try:
            hidden = tuple(int(h) for h in args.hidden.split(","))
        except ValueError:
            raise ConfigError(f"--hidden={args.hidden!r}: expected integers like 64,32") from None
    return TrialSpec.build(
        dataset=args.dataset,
        n_parties=args.parties,
        split_scheme=args.split_scheme,
        partition=args.partition,
        model=args.model,
        hidden=hidden,
        protocol=args.protocol,
        protocol_params={} if args.q is None else {"q": args.q},
        optimizer=args.optimizer,
        lr=args.lr,
        epochs=args.epochs,
        batch_size=args.batch_size,
        aligned_ratio=args.aligned_ratio,
        n_labeled=args.n_labeled,
        seed=args.seed,
        device=args.device,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from trainables.trial import run_trial, summarize

        spec = spec_from_args(args)
        placement = Placement(args.transport, args.cpu_per_party, args.gpu_per_party, args.address)
        records = run_trial(spec, placement, data_dir=args.data_dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except DefenseNeverApplied as err:  # a valid spec whose defense changed nothing
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(summarize(records), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
