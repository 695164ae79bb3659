"""xgboost's federated server: mutual TLS per trial, dialled at the node's routable IP.

The server binds 0.0.0.0 (xgboost hard-codes it), so what keeps an outside host out is the
TLS handshake: these tests start real servers and real xgboost workers (insiders with the
trial's certificate, outsiders without it) and a real multi-node ``ray.cluster_utils``
cluster with the party actors on different nodes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trees.common import tree_data
from trainables.trees.tls import ClientTLS, TrialTLS, hosts_in, private_dir
from trainables.trees.xgb_federated import (
    XGBPartyInit,
    _listening,
    federated_server,
    run_federated,
    server_host,
    xgb_params,
)

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {"n_trees": 3, "max_depth": 3, "learning_rate": 0.3, "n_bins": 32}

# One worker of a 1-worker federation: prints JOINED once an allreduce went through the
# server. argv: address, then "" or the paths of CA, client key, client cert.
WORKER = textwrap.dedent("""
    import sys
    import numpy as np
    import xgboost as xgb
    address, *tls = sys.argv[1:]
    env = {"dmlc_communicator": "federated", "federated_server_address": address,
           "federated_world_size": 1, "federated_rank": 0}
    if tls:
        env.update(federated_server_cert_path=tls[0], federated_client_key_path=tls[1],
                   federated_client_cert_path=tls[2])
    with xgb.collective.CommunicatorContext(**env):
        out = xgb.collective.allreduce(np.ones(2), xgb.collective.Op.SUM)
    print("JOINED", out.tolist(), flush=True)
""")


def _worker(address: str, *paths: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, address, *paths], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip


def _stop(proc: subprocess.Popen) -> str:
    """Kill ``proc`` (one we started) if still running; return what it printed."""
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate()
    return out


def test_private_dir_is_owner_only_and_removed() -> None:
    with pytest.raises(RuntimeError), private_dir({"k.pem": b"secret"}) as paths:
        root = Path(paths["k.pem"]).parent
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        assert stat.S_IMODE(os.stat(paths["k.pem"]).st_mode) == 0o600
        assert Path(paths["k.pem"]).read_bytes() == b"secret"
        raise RuntimeError("removed on error too")
    assert not root.exists()


def test_each_trial_gets_fresh_certificates_for_the_node_ip() -> None:
    a, b = TrialTLS.issue("192.0.2.7", 2), TrialTLS.issue("192.0.2.7", 2)
    assert hosts_in(a.server_cert) == ["192.0.2.7"]
    assert a.ca_cert != b.ca_cert and a.clients[0].key != b.clients[0].key
    assert a.clients[0].key != a.clients[1].key  # one key pair per rank
    assert all(c.ca_cert == a.ca_cert for c in a.clients)


@pytest.mark.ray
def test_outsider_without_the_trial_certificate_cannot_join(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An insecure worker, and one holding another trial's client certificate (and this
    trial's public CA), both dial the server; neither gets an allreduce through, while a
    worker with this trial's certificate does. With a plain server the first one joins.
    The server's key is off the disk once it listens."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where private_dir writes
    host = server_host()
    assert not host.startswith("127.")
    tls, other = TrialTLS.issue(host, 1), TrialTLS.issue(host, 1)
    mine, foreign = tls.clients[0], other.clients[0]
    with federated_server(1, host, tls) as address:
        assert list(tmp_path.iterdir()) == []  # listening, and its key files are gone
        printed, inside = _outsiders_and_insider(address, mine, foreign)
    assert "JOINED [1.0, 1.0]" in inside
    assert [("JOINED" in out) for out in printed] == [False, False], printed


def _outsiders_and_insider(address: str, mine: ClientTLS, foreign: ClientTLS) -> tuple:
    """Start both outsiders and the insider; give the outsiders at least 10 s to join."""
    with (
        private_dir({"ca": mine.ca_cert, "key": mine.key, "cert": mine.cert}) as own,
        private_dir({"ca": mine.ca_cert, "key": foreign.key, "cert": foreign.cert}) as alien,
    ):
        start = time.monotonic()
        outsiders = [_worker(address), _worker(address, alien["ca"], alien["key"], alien["cert"])]
        insider = _worker(address, own["ca"], own["key"], own["cert"])
        try:
            insider.wait(timeout=120)
            time.sleep(max(0.0, 10.0 - (time.monotonic() - start)))  # outsiders had >= 10 s
        finally:
            printed = [_stop(p) for p in outsiders]
            inside = _stop(insider)
    return printed, inside


# A stand-in trial process: starts a server, prints its address, then waits to be killed.
TRIAL_PROCESS = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from trainables.trees.tls import TrialTLS
    from trainables.trees.xgb_federated import federated_server
    host = sys.argv[1]
    with federated_server(1, host, TrialTLS.issue(host, 1)) as address:
        print(address, flush=True)
        time.sleep(600)
""")


@pytest.mark.ray
def test_server_stops_listening_when_its_trial_process_is_killed(ray_session: None) -> None:
    host = server_host()
    trial = subprocess.Popen([sys.executable, "-c", TRIAL_PROCESS, host, str(ROOT)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        port = int(trial.stdout.readline().strip().rsplit(":", 1)[1])  # type: ignore[union-attr]
        assert _listening(host, port)
    finally:
        _stop(trial)  # SIGKILL: no cleanup code of the trial runs
    deadline = time.monotonic() + 15
    while _listening(host, port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _listening(host, port)


def _split(dataset: str, n_parties: int) -> tuple[list[XGBPartyInit], np.ndarray, dict, int]:
    """Rank-ordered inits (active first) and the centralized twin's test predictions."""
    spec = TrialSpec.build(dataset=dataset, model="xgboost", n_parties=n_parties,
                           model_params=PARAMS)  # fmt: skip
    data = tree_data(spec, load_dataset(dataset))
    ranks = [n_parties - 1, *range(n_parties - 1)]
    inits = [
        XGBPartyInit(p, r, data.X_train[p], data.X_test[p], data.y_train if r == 0 else None)
        for r, p in enumerate(ranks)
    ]
    params, rounds = xgb_params(PARAMS, data.n_classes, 0)
    X = np.hstack([data.X_train[p] for p in ranks])
    central = xgb.train(params, xgb.DMatrix(X, label=data.y_train), rounds)
    expected = central.predict(xgb.DMatrix(np.hstack([data.X_test[p] for p in ranks])))
    return inits, expected, params, rounds


@pytest.mark.ray
def test_tls_trial_dials_the_node_ip_and_matches_centralized(ray_session: None) -> None:
    inits, expected, params, rounds = _split("breast_cancer", 2)
    results = run_federated(inits, params, rounds, Placement("ray"))
    host = server_host()
    for r in results:
        assert r["server"].rsplit(":", 1)[0] == host  # the node's IP, not 127.0.0.1
        np.testing.assert_allclose(r["pred"], expected, rtol=1e-5, atol=1e-6)


# Runs in its own process, joined to the cluster (the test process keeps its local Ray).
CLUSTER_TRIAL = textwrap.dedent("""
    import json, sys
    import numpy as np, ray
    sys.path.insert(0, sys.argv[2])
    from tests.test_trees_tls import _split
    from trainables.transport.placement import Placement
    from trainables.trees.xgb_federated import run_federated
    ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False)
    inits, expected, params, rounds = _split("breast_cancer", 2)
    results = run_federated(inits, params, rounds, Placement("ray", address=sys.argv[1]))
    print(json.dumps({
        "driver_node": ray.get_runtime_context().get_node_id(),
        "nodes": [r["node_id"] for r in results],
        "servers": [r["server"] for r in results],
        "driver_ip": ray.util.get_node_ip_address(),
        "equal": all(np.allclose(r["pred"], expected, rtol=1e-5, atol=1e-6) for r in results),
    }))
""")


@pytest.mark.ray
@pytest.mark.slow
def test_parties_on_different_cluster_nodes_train_over_tls() -> None:
    """Head with no CPUs (the trial and its server), two 1-CPU workers: the two party
    actors must land on different nodes, both other than the server's."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        proc = subprocess.run(
            [sys.executable, "-c", CLUSTER_TRIAL, cluster.address, str(ROOT)],
            cwd=ROOT, capture_output=True, text=True, timeout=400,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-4000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        cluster.shutdown()
    assert len(set(out["nodes"])) == 2 and out["driver_node"] not in out["nodes"]
    assert {s.rsplit(":", 1)[0] for s in out["servers"]} == {out["driver_ip"]}
    assert out["equal"] is True
