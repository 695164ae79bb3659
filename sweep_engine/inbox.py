"""How a trial's records reach the driver: through Ray's key-value store, not Tune's results.

Why not inside a Tune result: Tune keeps results (each trial's last one to the end of the
run, the one beside a checkpoint), hands them to searchers, schedulers and loggers, and sizes
its snapshots by them. Records are the sink's. So a trial posts each batch of finished
trainings here under a key of this driver run and reports only the key; the driver's
callback takes the batch (read, then delete) and writes it.

A batch that a trial posted and then died before reporting is still here: the driver takes
what is left when Tune ends (``Inbox.rest``), so a training that finished is not lost to a
fault after it finished (the sink writes each training once, whoever posts it twice).

The store is the GCS's key-value table (on the head node; Tune keeps its own registry there
too), reached only through this module: another carrier (an actor) changes this file only.
A driver killed mid-run leaves its last unread batches there until that Ray ends.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import ray
from ray.experimental import internal_kv

from trainables.records import Record

NAMESPACE = "vflsweep-records"

# trainings and their records: what a pack reports at once
Batch = list[tuple[str, list[Record]]]


def _connected() -> None:
    """The store's client of this process, set again where something reset it while Ray
    stays connected (``ray.cluster_utils.Cluster.shutdown`` resets it in every process
    that used one, whichever Ray that process is connected to: tests do)."""
    if not internal_kv._internal_kv_initialized():
        # set by ray.init on the worker object (an attribute its class does not declare)
        internal_kv._initialize_internal_kv(vars(ray._private.worker.global_worker)["gcs_client"])


def _encode(batch: Batch) -> str:
    return json.dumps([[tid, [r.to_json() for r in records]] for tid, records in batch])


def _decode(text: bytes) -> Batch:
    return [(tid, [Record.from_json(r) for r in rows]) for tid, rows in json.loads(text)]


@dataclass(frozen=True)
class Inbox:
    """One driver run's inbox (the prefix of its keys); sent to every trial in its context."""

    run: str = field(default_factory=lambda: uuid.uuid4().hex)

    def post(self, batch: Batch) -> str:
        """Store ``batch`` (in a trial); returns the key its report carries."""
        key = f"{self.run}/{uuid.uuid4().hex}"
        _connected()
        internal_kv._internal_kv_put(key, _encode(batch), namespace=NAMESPACE)
        return key

    def take(self, key: str) -> Batch:
        """The batch under ``key``, removed from the store (in the driver); empty if it
        was taken already."""
        _connected()
        text = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
        if text is None:
            return []
        internal_kv._internal_kv_del(key, namespace=NAMESPACE)
        return _decode(text)

    def rest(self) -> Batch:
        """Every batch still here (posted by a trial that died before its report), taken."""
        _connected()
        keys = internal_kv._internal_kv_list(f"{self.run}/", namespace=NAMESPACE)
        return [item for key in sorted(keys) for item in self.take(key.decode())]
