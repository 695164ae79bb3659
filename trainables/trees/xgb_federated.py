"""XGBoost VFL on xgboost's own federated column-split training (no boosting re-implemented).

A federated server (``xgboost.federated``'s tracker) runs in a child process of the trial's
own process, on that process's Ray node; each party runs in its own process (a Ray actor,
on any node) as one federated worker holding only its columns, as a ``DMatrix`` with
``data_split_mode=COL``. Labels: in column-split mode xgboost computes gradients on rank 0
only and broadcasts them (its vertical federated mode), so only rank 0 needs labels. The
active party (party K-1) is rank 0 and the only one given labels; a passive party's
``DMatrix`` has no labels at all (``get_label()`` is empty, which ``fit`` reports and the
tests check). Rank r's columns come r-th in xgboost's global feature order, so the
centralized twin joins columns as [active, passive 0, ...].

Who can join: xgboost's plugin binds the server to 0.0.0.0 (hard-coded), so the port is
open on every interface of the server's node. Every trial therefore runs it with mutual
TLS (``trainables.trees.tls``): fresh certificates per trial, the server cert valid for the
node's routable IP (``ray.util.get_node_ip_address()``), which is also the address every
worker dials, so workers on other nodes reach it and a client without the trial's client
certificate is refused in the TLS handshake. The server relays rank 0's gradients in
plain inside TLS, so it runs with the trial (the active party's side), never at a passive
party.

Caveats: traffic inside xgboost's collective is not exposed, so ``comm_bytes`` is 0 and
``extra['comm_bytes_measured']`` is false. Every worker ends with the same model (the
non-secure plugin shares split values), and predicting a column-split DMatrix is itself
a collective call, so every party predicts together.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import IO, TypedDict

import numpy as np

from trainables.endpoint import Endpoint
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement
from trainables.trees.tls import ClientTLS, TrialTLS, client_config, client_files, private_dir
from trainables.trees.tls import server_files as tls_server_files
from trainables.trees.xgb_tap import Sent, XGBParams, tapped_train

FEDERATED = "federated"


@dataclass(frozen=True)
class XGBPartyInit:
    """One federated worker: its rank, its own columns, labels only at rank 0."""

    party_id: int
    rank: int
    X_train: np.ndarray  # (N, d_k)
    X_test: np.ndarray  # (M, d_k)
    y_train: np.ndarray | None  # (N,) at the active party (rank 0) only
    tap: bool = False  # train via xgb_tap.py so a passive returns what rank 0 sent it

    def build(self) -> XGBParty:
        if (self.y_train is not None) != (self.rank == 0):
            raise ValueError("labels go to rank 0 (the active party) and nowhere else")
        return XGBParty(self)


@dataclass(frozen=True)
class Join:
    """How one worker joins one trial: where the server is and this rank's TLS material.

    PEM bytes, not paths: the worker may run on another node than the one that issued them.
    """

    address: str  # "ip:port" of the server's node
    world: int
    tls: ClientTLS


class Fitted(TypedDict):
    """What one worker's ``fit`` returns (plain data: an actor sends it back)."""

    pred: np.ndarray  # (M,) or (M, C) test predictions
    labels_here: int  # how many labels its DMatrix held (0 at a passive party)
    n_col: int
    seconds: float
    pid: int
    node_id: str | None
    server: str
    received: list[Sent]  # what rank 0 sent it (``tap``, passive workers), else empty


class XGBParty(Endpoint):
    """Ray-free: ``fit`` joins the federation, trains, and predicts the test rows."""

    def __init__(self, init: XGBPartyInit) -> None:
        super().__init__()  # xgboost's own messages pass no hooks of ours
        self.party_id, self.rank = init.party_id, init.rank
        self.X_train, self.X_test, self.y_train = init.X_train, init.X_test, init.y_train
        self.tap = init.tap

    def fit(self, join: Join, params: XGBParams, rounds: int) -> Fitted:
        import xgboost as xgb
        from xgboost.core import DataSplitMode

        with joined(join, self.rank):
            col = DataSplitMode.COL
            dtrain = xgb.DMatrix(self.X_train, label=self.y_train, data_split_mode=col)
            dtest = xgb.DMatrix(self.X_test, data_split_mode=col)
            start = time.perf_counter()
            if self.tap:
                booster, received = tapped_train(params, dtrain, rounds, self.y_train)
            else:
                booster, received = xgb.train(params, dtrain, rounds), []
            pred = booster.predict(dtest)  # (M,) or (M, C): a collective call
            seconds = time.perf_counter() - start
            labels_here = int(dtrain.get_label().size)
            n_col = int(dtrain.num_col())
        return {"pred": pred, "labels_here": labels_here, "n_col": n_col, "seconds": seconds,
                "pid": os.getpid(), "node_id": _node_id(), "server": join.address,
                "received": received}  # fmt: skip


@contextmanager
def joined(join: Join, rank: int) -> Iterator[None]:
    """xgboost's federated communicator for ``join``; its key files gone once connected.

    xgboost reads the key and certificates when the communicator starts (gRPC then holds
    them in memory), so they sit on this node's disk for that moment, not for the
    training, and a worker killed mid-training leaves none behind.
    """
    import xgboost as xgb

    env: dict[str, str | int] = {
        "dmlc_communicator": FEDERATED,
        "federated_server_address": join.address,
        "federated_world_size": join.world,
        "federated_rank": rank,
    }
    with ExitStack() as stack:
        with private_dir(client_files(join.tls)) as paths:  # on this worker's node
            env.update(client_config(paths))
            stack.enter_context(xgb.collective.CommunicatorContext(**env))
        yield


def _node_id() -> str | None:
    """The Ray node this worker ran on (None outside Ray): evidence of where parties ran."""
    from trainables.transport.ray_actors import current_node_id

    return current_node_id()


def free_port() -> int:
    """A port free on every interface now (the server binds 0.0.0.0 on it right after)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def server_host() -> str:
    """This process's routable node IP, as Ray reports it (what other nodes can reach)."""
    from trainables.transport.ray_actors import node_ip_address

    return node_ip_address()


def xgb_params(
    model_params: Mapping[str, int | float | str], n_classes: int, seed: int
) -> tuple[XGBParams, int]:
    """xgboost's parameters and round count from the spec's ``model_params``."""
    params: XGBParams = {
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
    inits: list[XGBPartyInit], params: XGBParams, rounds: int, placement: Placement
) -> list[Fitted]:
    """Start the server here (this process's node), run every worker (one Ray actor
    each, on any node) to completion over mutual TLS, stop the server.

    Always on Ray, whatever ``placement.transport`` says: the workers of one federation
    must run at the same time, each in its own process.
    """
    on_ray = dataclasses.replace(placement, transport="ray")
    with open_parties(inits, on_ray) as group:  # joins / starts Ray first
        host = server_host()
        tls = TrialTLS.issue(host, len(inits))
        with federated_server(len(inits), host, tls) as address:
            joins = [Join(address, len(inits), tls.clients[init.rank]) for init in inits]
            return group.call_many([(k, XGBParty.fit, (join, params, rounds))
                                    for k, join in enumerate(joins)])  # fmt: skip


# The server child: xgboost's tracker, exiting when its parent (the trial) goes away, so a
# killed trial leaves no server listening.
_SERVER = """
import os, sys, time
import xgboost.federated as f
parent = os.getppid()
n, port, key, cert, ca = sys.argv[1:]
# keep a reference: a dropped tracker's __del__ frees it, which blocks until training ends
tracker = f.FederatedTracker(n_workers=int(n), port=int(port), secure=True,
                             server_key_path=key, server_cert_path=cert, client_cert_path=ca,
                             timeout=3600)
tracker.start()
while os.getppid() == parent:
    time.sleep(0.5)
os._exit(0)  # not a normal exit: that would wait on the tracker's thread, which never ends
"""


@contextmanager
def federated_server(
    n_workers: int, host: str, tls: TrialTLS, wait_s: float = 60.0
) -> Iterator[str]:
    """xgboost's federated server with mutual TLS in a child process; yields "host:port".

    A child process, not a tracker in this one: the in-process tracker's ``free`` and
    ``wait_for`` block after non-secure column-split training (seen with xgboost 3.2).
    Its key, cert and the CA sit in a private directory only until it listens (it has
    read them by then). Its log goes to a file, not a pipe: every refused handshake logs
    a line, and an unread pipe would fill up and stall the server.
    """
    with tempfile.TemporaryFile() as log, ExitStack() as running:
        with private_dir(tls_server_files(tls)) as paths:
            port = free_port()
            argv = [str(n_workers), str(port), paths["server-key.pem"], paths["server.pem"],
                    paths["ca.pem"]]  # fmt: skip
            proc = subprocess.Popen([sys.executable, "-c", _SERVER, *argv],
                                    stdout=log, stderr=log)  # fmt: skip
            running.callback(_stop, proc)
            _wait_listening(proc, host, port, log, wait_s)
        yield f"{host}:{port}"


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_listening(
    proc: subprocess.Popen, host: str, port: int, log: IO[bytes], wait_s: float
) -> None:
    deadline = time.monotonic() + wait_s
    while not _listening(host, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            err = log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"xgboost federated server did not start on {host}:{port}: {err}")
        time.sleep(0.05)


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def predicted_class(pred: np.ndarray) -> np.ndarray:
    return (pred > 0.5).astype(np.int64) if pred.ndim == 1 else pred.argmax(1)
