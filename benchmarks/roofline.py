"""``python -m benchmarks.roofline``: each heavy piece's GFLOP/s against this machine's
matmul peak, in one run (issue 67).

Why: "is it fast?" needs a roof. This measures the roof (torch float32 square matmuls,
one thread and all threads, median over repeats; and a one-thread float32 mat-vec, the
roof of a piece that streams a matrix once per step) and, on one thread, each heavy
piece at the papers' per-step shapes on digits (``defenses.yaml``: 2-party aggVFL
FedSGD, MLP-2 32-32-10 bottoms, batch 256, 1437 training rows), calling the project's
own code: a training epoch per defense, PMC and MC (``completion_fast``), BLI's
inversion step and set-up, GRN and TBM. Each piece's FLOPs come from its shapes (the
functions below; only matmuls are counted, 2·m·n·k each: elementwise work is not) and its
CPU seconds (this thread's, ``time.thread_time``) are the difference of two runs of
different lengths (fixed costs such as copies, set-up and prediction cancel), median
over ``--repeats``. A defense's extra matmuls (MID's bottleneck, dCor's distances, CAE's
encoder) are counted by torch's ``FlopCounterMode`` (2·m·n·k of each mm/bmm from its
shapes) over the same epochs; the undefended step's count must equal the formula.
``--quick``: smaller roofs and runs (seconds, for the test). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch.utils.flop_counter import FlopCounterMode

from trainables.attacks import ATTACKS, bli, bli_inversion, completion, completion_fast
from trainables.attacks.harness import nn_view_of
from trainables.data import load_dataset
from trainables.defenses import DEFENSES
from trainables.spec import TrialSpec
from trainables.vfl.training import prepare_parties, train_local_parties

DATASET = "digits"  # the multi-class attacks' dataset in defenses.yaml
BOTTOM = (32, 32, 10)  # digits' MLP-2 bottom per party: 32 features -> 32 -> C = 10
ATTACKED: list[tuple[str, dict[str, Any]]] = [
    (name, {}) for name in ("pmc", "mc", "bli", "grn", "tbm")
]


# --- FLOP counts from shapes ------------------------------------------------------------


def linear_flops(rows: int, i: int, o: int, backward: str = "none") -> int:
    """A Linear (rows, i) -> (rows, o), forward and backward: forward 2·rows·i·o;
    ``backward``: ``weights`` adds the weight gradient (another 2·rows·i·o), ``input`` the
    input gradient only (frozen weights), ``both`` both (4·rows·i·o more: backward = 2x
    forward)."""
    fwd = 2 * rows * i * o
    return fwd * {"none": 1, "weights": 2, "input": 2, "both": 3}[backward]


def mlp_flops(
    rows: int, widths: Sequence[int], backward: str = "none", input_grad: bool = False
) -> int:
    """A Linear-ReLU stack of ``widths`` (in, h..., out) on ``rows`` rows. ``backward``:
    ``weights`` (training: weight gradients, and input gradients of every layer but the
    first unless ``input_grad``), ``input`` (frozen weights: input gradients of every
    layer but the first unless ``input_grad``) or ``none``."""
    # per layer: (its backward where its input needs a gradient, where not)
    kinds = {"weights": ("both", "weights"), "input": ("input", "none"), "none": ("none",) * 2}
    with_input, without = kinds[backward]
    return sum(
        linear_flops(rows, i, o, with_input if k > 0 or input_grad else without)
        for k, (i, o) in enumerate(itertools.pairwise(widths))
    )


def nn_epoch_flops(rows: int, parties: int = 2, widths: Sequence[int] = BOTTOM) -> int:
    """An aggVFL FedSGD epoch over ``rows`` training rows: each party's bottom forward and
    backward (weights; the summing top has no matmul). Linear in the batch, so the sum
    over an epoch's batches is this at ``rows``: 2·(4·n·1344 + 2·n·320) on digits."""
    return parties * mlp_flops(rows, widths, "weights")


def completion_step_flops(bs: int, widths: Sequence[int] = BOTTOM, c: int = 10) -> int:
    """One MixMatch step of ``completion_fast`` (w = the bottom's output width):
    its share of ``block_inputs``: the frozen bottom on the 3B jittered and mixed rows
    (2·3B·Σ i·o) and the mixed targets t0 (2B, B) @ (B, C); ``head_grads``: logits
    (3B, w+1) @ (w+1, C), the guessed labels' mix (2B, B) @ (B, C), the gradient
    (C, 2B) @ (2B, w+1)."""
    block = mlp_flops(3 * bs, widths) + 2 * (2 * bs) * bs * c
    return block + completion_head_flops(bs, widths[-1], c)


def completion_head_flops(bs: int, w: int = 10, c: int = 10) -> int:
    """``head_grads``' part of a completion step (the numpy one, step by step)."""
    return 2 * (3 * bs) * (w + 1) * c + 2 * (2 * bs) * bs * c + 2 * c * (2 * bs) * (w + 1)


def bli_step_flops(bc: int, rank: int) -> int:
    """One inversion step of the whitened match: G' (BC,) @ U (BC, r), then U @ res (r,):
    two mat-vecs, 4·BC·r (U streamed twice: 8·BC·r bytes in float32)."""
    return 4 * bc * rank


def bli_setup_flops(bc: int, p: int, rank: int) -> int:
    """BLI's set-up, matmuls only: the Gram J^T J (syrk, BC·P·(P+1)) and the basis
    J V (BC, P) @ (P, r). Not counted: the Jacobian (vmap of jacrev) and ``eigh``."""
    return bc * p * (p + 1) + 2 * bc * p * rank


def grn_row_flops(d_cond: int, d_gen: int, hidden: int, widths: Sequence[int] = BOTTOM) -> int:
    """GRN per training row of an epoch: the generator (d_cond + d_gen) -> hidden -> d_gen
    trained (its input needs no gradient), the released passive bottom on the fake rows
    (frozen: input gradients, down to the fake rows), the active bottom forward only."""
    gen = mlp_flops(1, (d_cond + d_gen, hidden, d_gen), "weights")
    return gen + mlp_flops(1, widths, "input", True) + mlp_flops(1, widths)


def tbm_row_flops(c: int, hidden: int, d_out: int) -> int:
    """TBM per auxiliary row of an epoch: the inverse model C -> hidden -> d_0, trained."""
    return mlp_flops(1, (c, hidden, d_out), "weights")


# --- roofs -------------------------------------------------------------------------------


def matmul_peak(
    n: int, threads: int, repeats: int, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """GFLOP/s of an (n, n) @ (n, n) torch matmul (2n^3; float32 unless ``dtype``: BLI's
    set-up is float64), median over ``repeats`` on ``threads`` threads after one warm-up:
    this thread's CPU seconds on one thread (as the pieces are timed), wall on several."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        torch.mm(a, b)
        clock = time.thread_time if threads == 1 else time.perf_counter  # as the pieces'
        times = []
        for _ in range(repeats):
            start = clock()
            torch.mm(a, b)
            times.append(clock() - start)
    finally:
        torch.set_num_threads(before)
    s = statistics.median(times)
    gflops = round(2 * n**3 / s / 1e9, 2)
    return {"n": n, "threads": threads, "seconds": round(s, 4), "gflops": gflops}


def matvec_roof(n: int, repeats: int) -> dict[str, Any]:
    """One thread, numpy float32 (n, n) @ (n,) (what BLI's step is): GFLOP/s (2n^2) and
    GB/s of the matrix streamed (4n^2 bytes), median over ``repeats`` x 20 products."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    x = np.ones(n, np.float32)
    with threadpool_limits(1):
        a @ x
        times = []
        for _ in range(repeats):
            start = time.thread_time()
            for _ in range(20):
                a @ x
            times.append((time.thread_time() - start) / 20)
    s = statistics.median(times)
    return {
        "n": n,
        "gflops": round(2 * n * n / s / 1e9, 2),
        "gb_per_s": round(4 * n * n / s / 1e9, 2),
    }


def bare_mm(m: int, k: int, n: int) -> float:
    """GFLOP/s of a bare one-thread torch (m, k) @ (k, n) float32 (2·m·k·n), median of 5
    runs of 200: the most a piece's largest matmul could reach at its own small shape."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    times = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(200):
            torch.mm(a, b)
        times.append((time.thread_time() - start) / 200)
    return round(2 * m * k * n / statistics.median(times) / 1e9, 2)


def caches() -> dict[str, str]:
    """CPU 0's data caches by level, as Linux reports them (what fits where)."""
    out = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        if (index / "type").read_text().strip() != "Instruction":
            out[f"L{(index / 'level').read_text().strip()}"] = (index / "size").read_text().strip()
    return out


# --- timing ------------------------------------------------------------------------------


def per_unit(run: Callable[[int], object], short: int, long: int, repeats: int) -> float:
    """CPU seconds of this thread per unit of ``run(units)``: (t(long) - t(short)) /
    (long - short), median over ``repeats`` (fixed costs cancel)."""
    diffs = []
    for _ in range(repeats):
        got = []
        for units in (short, long):
            start = time.thread_time()
            run(units)
            got.append(time.thread_time() - start)
        diffs.append((got[1] - got[0]) / (long - short))
    return statistics.median(diffs)


def row(
    shapes: str, unit: str, flops: int, seconds: float, peak: float, **extra: Any
) -> dict[str, Any]:
    """One piece: FLOPs per unit, seconds per unit, GFLOP/s and its % of the one-thread peak."""
    gflops = flops / seconds / 1e9
    return {
        "shapes": shapes, "unit": unit, "flop_per_unit": flops,
        "seconds_per_unit": float(f"{seconds:.4g}"), "gflops": round(gflops, 3),
        "pct_of_1thread_peak": round(100 * gflops / peak, 2), **extra,
    }  # fmt: skip


# --- pieces ------------------------------------------------------------------------------


def training(
    defense: str, batch: int, epochs: tuple[int, int], repeats: int, peak: float
) -> dict[str, Any]:
    """A training step under ``defense`` (its middle grid strength) at ``batch``: CPU
    seconds per step from epochs (short, long); FLOPs: the formula (undefended) and
    torch's counter over one epoch (difference of 2 and 1 epochs: the defense's set-up,
    e.g. CAE's autoencoder, cancels)."""
    extra: dict[str, Any] = {}
    if defense != "none":
        grid = DEFENSES.get(defense).info.grid
        extra = {"defense": defense, "defense_param": grid[len(grid) // 2]}
    spec = TrialSpec.build(dataset=DATASET, seed=0, epochs=1, batch_size=batch, **extra)
    prepared = prepare_parties(spec, load_dataset(DATASET))
    rows = len(prepared.inits[0].X_train)
    steps = math.ceil(rows / batch)
    counted = []
    for e in (1, 2):
        with FlopCounterMode(display=False) as counter:
            train_local_parties(prepared, e)
        counted.append(counter.get_total_flops())
    per_epoch = counted[1] - counted[0]
    seconds = per_unit(lambda e: train_local_parties(prepared, e), *epochs, repeats) / steps
    formula = nn_epoch_flops(rows)
    flops = (formula if defense == "none" else per_epoch) // steps
    shapes = f"batch_size={batch}: {rows} rows in {steps} batches, 2 bottoms MLP 32-32-10"
    out = row(shapes, "step", flops, seconds, peak, bare_mm_gflops=bare_mm(rows // steps, 32, 32))
    out["timed_epochs"] = f"{epochs[1] - epochs[0]} of 30"
    out.update(strength=extra.get("defense_param"), counter_flop_per_epoch=per_epoch)
    if defense == "none":
        out["formula_flop_per_epoch"] = formula
    return out


def trained_view(name: str, parties: Sequence[Any]) -> Any:
    """The attacker's ``PartyView`` of ``name`` on the trained parties (the harness's)."""
    return nn_view_of(parties, 0)(ATTACKS.get(name).info)[1]


def completion_piece(
    name: str, parties: Sequence[Any], steps: tuple[int, int], repeats: int, peak: float
) -> dict[str, Any]:
    """PMC or MC at the defaults (fast path) for ``steps`` of its 25 x 1024, per step; and
    per step, its random draws (``draw_block``) and its block part (the draws and
    ``block_inputs``: the bottom's batched forward); the head steps are the rest."""
    view = trained_view(name, parties)

    def run(n: int) -> None:
        ATTACKS.create(name, epochs=1, steps_per_epoch=n).run(view)

    seconds = per_unit(run, *steps, repeats)
    defaults: dict[str, Any] = completion.COMPLETION_DEFAULTS
    bs = int(defaults["batch_size"])
    xl = torch.as_tensor(view.X_train[view.aux.label_rows], dtype=torch.float32)
    yl = torch.nn.functional.one_hot(torch.as_tensor(view.aux.labels), 10).float()
    xu = torch.as_tensor(view.X_train, dtype=torch.float32)
    gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    feat, noise = (xl.shape[1],), float(defaults["noise"])

    def draws(n: int) -> completion_fast.Block:
        return completion_fast.draw_block(gen, rng, n, bs, len(xl), len(xu), feat, noise, 0.75)

    def block(n: int) -> None:
        completion_fast.block_inputs(view.bottom.eval(), xl, yl, xu, draws(n), noise)

    s_draw = per_unit(draws, 32, completion_fast.BLOCK_STEPS, repeats)
    s_block = per_unit(block, 32, completion_fast.BLOCK_STEPS, repeats)
    return row(
        f"B={bs}, 3B={3 * bs} rows through the bottom, head (3B, 11) @ (11, 10); "
        f"{len(xl)} labeled rows", "step", completion_step_flops(bs), seconds, peak,
        timed_steps=f"{steps[1] - steps[0]} of 25600",
        head_flop_per_step=completion_head_flops(bs),
        draws_seconds_per_step=float(f"{s_draw:.3g}"),
        block_seconds_per_step=float(f"{s_block:.3g}"),
    )  # fmt: skip


def bli_pieces(
    parties: Sequence[Any], steps: tuple[int, int], repeats: int, peak: float
) -> dict[str, Any]:
    """BLI at the defaults on the first round's batch (whitened match): one inversion
    step (``invert_dummies`` on ``whitened``, patience off so every step runs: ``steps``
    of at most 10,000; and the same loop on a match that does nothing: the step's work
    outside the two mat-vecs) and the set-up (Jacobian, Gram, eigh, basis: ``bli.jacobian``,
    ``bli_inversion.gram_basis``), with the Jacobian's seconds apart."""
    view = trained_view("bli", parties)
    msg = next(m for m in view.received if m.kind == "gradient" and m.batch is not None)
    rows = view.schedule.rows(msg.batch)
    x = torch.from_numpy(np.ascontiguousarray(view.X_train[rows], dtype=np.float32))
    g = torch.as_tensor(np.asarray(msg.payload, dtype=np.float32))
    model = bli.initial_bottom(view).eval()
    jac = bli.jacobian(model, x)
    assert jac is not None, "digits' bottom on a batch of ~256 fits the whitened match"
    observed = jac.T @ g.reshape(-1).double()
    got = bli_inversion.gram_basis(jac, observed) or bli.svd_basis(jac, observed)
    basis, target = got
    bc, p = jac.shape
    rank = basis.shape[1]
    with torch.no_grad():
        h0 = model(x).numpy()
    params = {**ATTACKS.create("bli").params, "patience": 10**9}
    match = bli_inversion.whitened(basis, target)
    with threadpool_limits(1):
        step_s = per_unit(
            lambda n: bli_inversion.invert_dummies(h0, match, {**params, "steps": n}, 0),
            *steps,
            repeats,
        )

        def idle(g: np.ndarray) -> tuple[np.ndarray, float]:  # no match: the step's rest
            return np.zeros_like(g), 1.0

        rest_s = per_unit(
            lambda n: bli_inversion.invert_dummies(h0, idle, {**params, "steps": n}, 0),
            *steps,
            repeats,
        )
        jac_s = per_unit(lambda n: [bli.jacobian(model, x) for _ in range(n)], 0, 1, repeats)
        setup_s = per_unit(
            lambda n: [bli_inversion.gram_basis(jac, observed) for _ in range(n)], 0, 1, repeats
        )
        j = jac.numpy()
        gram_s = per_unit(lambda n: [j.T @ j for _ in range(n)], 0, 1, repeats)  # its 1st part
    step = row(
        f"B={len(rows)}, C=10: U (BC={bc}, r={rank}) float32, two mat-vecs", "step",
        bli_step_flops(bc, rank), step_s, peak,
        timed_steps=f"{steps[1] - steps[0]} of at most 10000", bytes_per_step=8 * bc * rank,
        gb_per_s=round(8 * bc * rank / step_s / 1e9, 2),
        no_match_seconds_per_step=float(f"{rest_s:.3g}"),
    )  # fmt: skip
    setup = row(
        f"J (BC={bc}, P={p}) float64: Gram (P, P), eigh, basis (BC, r={rank})", "inversion",
        bli_setup_flops(bc, p, rank), setup_s, peak, jacobian_seconds=float(f"{jac_s:.3g}"),
        gram_seconds=float(f"{gram_s:.3g}"), gram_gflops=round(bc * p * (p + 1) / gram_s / 1e9, 2),
    )  # fmt: skip
    return {"bli_step": step, "bli_setup": setup}


def feature_pieces(
    parties: Sequence[Any], epochs: dict[str, tuple[int, int]], repeats: int, peak: float
) -> dict[str, Any]:
    """GRN and TBM at the defaults, per epoch of their training (60 and 50 epochs)."""
    out = {}
    for name in ("grn", "tbm"):
        view = trained_view(name, parties)
        p = ATTACKS.create(name).params

        def run(e: int, name: str = name, view: Any = view) -> None:
            ATTACKS.create(name, epochs=e).run(view)

        seconds = per_unit(run, *epochs[name], repeats)
        counted = []
        for e in (1, 2):
            with FlopCounterMode(display=False) as counter:
                run(e)
            counted.append(counter.get_total_flops())
        n, d0 = len(view.X_train), 32
        if name == "grn":
            bs = int(p["batch_size"])
            flops = n * grn_row_flops(32, d0, int(p["hidden"]))
            shapes = f"{n} rows in batches of {bs}: generator 64-{p['hidden']}-32, released bottoms"
        else:
            m, bs = len(view.aux.feature_rows), int(p["batch_size"])
            flops = m * tbm_row_flops(10, int(p["hidden"]), d0)
            shapes = f"{m} aux rows in batches of {bs}: inverse model 10-{p['hidden']}-32"
        total = {"grn": 60, "tbm": 50}[name]
        out[name] = row(
            shapes, f"epoch ({math.ceil((n if name == 'grn' else m) / bs)} steps)", flops, seconds,
            peak, timed_epochs=f"{epochs[name][1] - epochs[name][0]} of {total}",
            counter_flop_per_epoch=counted[1] - counted[0],
            bare_mm_gflops=bare_mm(bs, 64, 128) if name == "grn" else bare_mm(bs, 128, 32),
        )  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small roofs and runs (seconds)")
    parser.add_argument("--repeats", type=int, default=None, help="default: 5 (quick: 1)")
    args = parser.parse_args(argv)
    quick = args.quick
    repeats = args.repeats or (1 if quick else 5)
    threads = os.cpu_count() or 1
    n = 512 if quick else 2048
    roofs = {
        "matmul_1thread": matmul_peak(n, 1, repeats + 2),
        "matmul_all_threads": matmul_peak(n, threads, repeats + 2),
        "matmul_1thread_float64": matmul_peak(n, 1, repeats + 2, torch.float64),
        "matvec_1thread_in_l3": matvec_roof(1024 if quick else 1536, repeats),  # 9.4 MB
        "matvec_1thread_dram": matvec_roof(2048 if quick else 4096, repeats),  # 64 MB
    }
    peak = roofs["matmul_1thread"]["gflops"]
    torch.set_num_threads(1)
    pieces: dict[str, Any] = {}
    defenses = ["none", *([] if quick else DEFENSES.names())]
    with threadpool_limits(1):
        for d in defenses:
            pieces[f"train_{d}"] = training(d, 256, (1, 3) if quick else (2, 12), repeats, peak)
            print(json.dumps({d: pieces[f"train_{d}"]}), file=sys.stderr, flush=True)  # progress
        if not quick:
            pieces["train_none_b1024"] = training("none", 1024, (2, 12), repeats, peak)
        spec = TrialSpec.build(dataset=DATASET, seed=0, **({"epochs": 1} if quick else {}))
        prepared = prepare_parties(spec, load_dataset(DATASET), ATTACKED)
        parties = train_local_parties(prepared, int(spec.required("epochs")))[1]
        for name in ("pmc", "mc"):
            span = (64, 320) if quick else (256, 2304)
            pieces[name] = completion_piece(name, parties, span, repeats, peak)
            print(json.dumps({name: pieces[name]}), file=sys.stderr, flush=True)
    pieces.update(bli_pieces(parties, (20, 60) if quick else (200, 1200), repeats, peak))
    with threadpool_limits(1):
        spans = {"grn": (2, 6), "tbm": (2, 6)} if quick else {"grn": (10, 60), "tbm": (10, 50)}
        pieces.update(feature_pieces(parties, spans, repeats, peak))
    result = {
        "benchmark": "roofline", "quick": quick, "repeats": repeats, "cpus": threads,
        "torch": torch.__version__, "caches": caches(), "dataset": DATASET, "roofs": roofs,
        "pieces": pieces,
    }  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
