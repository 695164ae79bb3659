"""XGBoost VFL on xgboost's own federated column-split training (no boosting re-implemented).

A federated server (``xgboost.federated.run_federated_server``) runs in a child process;
each party runs in its own process (a Ray actor) as one federated worker holding only its
columns, as a ``DMatrix`` with ``data_split_mode=COL``. Labels: in column-split mode
xgboost computes gradients on rank 0 only and broadcasts them (its vertical federated
mode), so only rank 0 needs labels. The active party (party K-1) is rank 0 and the only
one given labels; a passive party's ``DMatrix`` has no labels at all (``get_label()`` is
empty, which ``fit`` reports and the tests check). Rank r's columns come r-th in xgboost's
global feature order, so the centralized twin joins columns as [active, passive 0, ...].

Caveats: the server binds 0.0.0.0 (hard-coded in xgboost's plugin); workers reach it at
127.0.0.1. Traffic inside xgboost's collective is not exposed, so ``comm_bytes`` is 0
and ``extra['comm_bytes_measured']`` is false. Every worker ends with the same model (the
non-secure plugin shares split values), and predicting a column-split DMatrix is itself
a collective call, so every party predicts together.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

FEDERATED = "federated"


@dataclass(frozen=True)
class XGBPartyInit:
    """One federated worker: its rank, its own columns, labels only at rank 0."""

    party_id: int
    rank: int
    X_train: np.ndarray  # (N, d_k)
    X_test: np.ndarray  # (M, d_k)
    y_train: np.ndarray | None  # (N,) at the active party (rank 0) only

    def build(self) -> XGBParty:
        if (self.y_train is not None) != (self.rank == 0):
            raise ValueError("labels go to rank 0 (the active party) and nowhere else")
        return XGBParty(self)


class XGBParty:
    """Ray-free: ``fit`` joins the federation, trains, and predicts the test rows."""

    def __init__(self, init: XGBPartyInit) -> None:
        self.party_id, self.rank = init.party_id, init.rank
        self.X_train, self.X_test, self.y_train = init.X_train, init.X_test, init.y_train

    def fit(self, port: int, world: int, params: dict[str, Any], rounds: int) -> dict[str, Any]:
        import xgboost as xgb
        from xgboost.core import DataSplitMode

        env = {
            "dmlc_communicator": FEDERATED,
            "federated_server_address": f"127.0.0.1:{port}",
            "federated_world_size": world,
            "federated_rank": self.rank,
        }
        with xgb.collective.CommunicatorContext(**env):
            col = DataSplitMode.COL
            dtrain = xgb.DMatrix(self.X_train, label=self.y_train, data_split_mode=col)
            dtest = xgb.DMatrix(self.X_test, data_split_mode=col)
            start = time.perf_counter()
            booster = xgb.train(params, dtrain, rounds)
            pred = booster.predict(dtest)  # (M,) or (M, C): a collective call
            seconds = time.perf_counter() - start
            labels_here = int(dtrain.get_label().size)
            n_col = int(dtrain.num_col())
        return {"pred": pred, "labels_here": labels_here, "n_col": n_col, "seconds": seconds,
                "pid": os.getpid()}  # fmt: skip


def free_port() -> int:
    """A port on 127.0.0.1 that is free now (the server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def xgb_params(model_params: dict[str, Any], n_classes: int, seed: int) -> tuple[dict, int]:
    """xgboost's parameters and round count from the spec's ``model_params``."""
    params: dict[str, Any] = {
        "tree_method": "hist",
        "max_depth": int(model_params.get("max_depth", 6)),
        "eta": float(model_params.get("learning_rate", 0.3)),
        "max_bin": int(model_params.get("n_bins", 32)),
        "lambda": float(model_params.get("reg_lambda", 1.0)),
        "min_child_weight": float(model_params.get("min_child_weight", 1.0)),
        "seed": int(seed),
        "nthread": 1,
    }
    if n_classes == 2:
        params["objective"] = "binary:logistic"
    else:
        params.update(objective="multi:softprob", num_class=int(n_classes))
    return params, int(model_params.get("n_trees", 5))


def run_federated(
    inits: list[XGBPartyInit], params: dict[str, Any], rounds: int, where: Any
) -> list[dict[str, Any]]:
    """Start the server, run every worker (one Ray actor each) to completion, stop it."""
    from trainables.trees.session import Placement, passive_transport

    place = Placement("ray", where.cpu_per_party, where.gpu_per_party, where.address,
                      where.reuse_actors)  # fmt: skip
    port = free_port()
    with federated_server(len(inits), port):
        with passive_transport(inits, place) as transport:
            args = [(port, len(inits), params, rounds)] * len(inits)
            return transport.call("fit", args, training=True)


@contextmanager
def federated_server(n_workers: int, port: int, wait_s: float = 60.0) -> Iterator[None]:
    """xgboost's federated server in a child process, stopped on exit.

    A child process, not a tracker in this one: the in-process tracker's ``free`` and
    ``wait_for`` block after non-secure column-split training (seen with xgboost 3.2).
    """
    code = (
        "import xgboost.federated as f; "
        f"f.run_federated_server(n_workers={n_workers}, port={port}, timeout=3600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + wait_s
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"xgboost federated server did not start on {port}: {err}")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def predicted_class(pred: np.ndarray) -> np.ndarray:
    return (pred > 0.5).astype(np.int64) if pred.ndim == 1 else pred.argmax(1)
