"""The sqlite MLflow store of a results folder: made with its artifact root beside it,
and made again when a killed first sync left it half made (``create_store``).

Why its own module: ``tracking.py`` syncs runs into any store; what a sqlite file on the
results disk needs (a lock, a schema check, a repair) is about that file alone.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path


def create_store(uri: str) -> None:
    """Create a new sqlite store with its artifact root beside it (``mlartifacts/``), or
    replace one that a killed first sync left half made.

    Why the root: a store MLflow's client creates gives its Default experiment the artifact
    root ``./mlruns`` of whatever folder the command ran in (the project folder, typically),
    so anything logged there lands outside the results. Our experiments set their own
    location (``experiment_id``); this covers the one MLflow makes itself.

    Why the repair: MLflow makes a store with ~330 schema statements that sqlite does not
    run as one transaction; a process killed among them (SIGKILL, a full disk) leaves a
    store every later open fails on (``table evaluation_datasets already exists``), for
    good. Such a store holds no run (runs come after the schema), the records are the
    source of truth and the sync is idempotent from them: the store is set aside (renamed,
    never deleted), a new one made, and this sync fills it. A store that holds runs is
    never moved: its problem is raised (the caller warns) with what to do.
    """
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri.removeprefix("sqlite:///"))  # sqlite:////abs/m.db -> /abs/m.db
    db.parent.mkdir(parents=True, exist_ok=True)
    with _folder_locked(db.parent):  # one creator or repairer at a time (other sweeps)
        if db.exists():
            problem = _schema_problem(db)
            if problem is None:
                return
            if _holds_runs(db):
                raise RuntimeError(
                    f"the MLflow store {db} cannot be used ({problem}) and holds runs, so it "
                    f"was left as it is; `mlflow db upgrade {uri}` (an older MLflow made it), "
                    "or move it aside: the next sync rebuilds every run from the records"
                )
            _close_engine(uri)
            aside = _set_aside(db)
            print(
                f"warning: the MLflow store {db} was left half made by an interrupted sync "
                f"({problem}); set aside as {aside.name}, a new store is rebuilt from the "
                "records (other sweeps of this folder: on their next run or analyze)",
                file=sys.stderr,
                flush=True,
            )
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        from trainables.results import faults

        faults.arm_mlflow_store_kill()  # tests only: a kill among the schema statements
        store = SqlAlchemyStore(uri, (db.parent / "mlartifacts").resolve().as_uri())
        store.engine.dispose()


@contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """``flock`` on the results folder's descriptor while a store is checked or made."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no directory locks on this file system: unlocked, as before
            pass
        yield
    finally:
        os.close(fd)


def _schema_problem(db: Path) -> str | None:
    """None when the store's schema is MLflow's newest, else what is wrong with it."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    try:
        with closing(sqlite3.connect(db)) as con:
            rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error as err:
        return f"no schema version: {err}"
    head, have = _get_latest_schema_revision(), (rows[0][0] if rows else None)
    return None if have == head else f"schema version {have}, MLflow's is {head}"


def _holds_runs(db: Path) -> bool:
    """Whether ``db`` has any run (True when that cannot be told: it is left alone)."""
    try:
        with closing(sqlite3.connect(db)) as con:
            return bool(con.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.OperationalError as err:  # a missing table: none; a busy store: unknown
        return "no such table" not in str(err)
    except sqlite3.DatabaseError:  # not a database at all: nothing readable in it
        return False


def _close_engine(uri: str) -> None:
    """Close the connections MLflow keeps to ``uri`` in this process (it caches an engine
    per URI): they would go on writing to the file once it is renamed."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engine = getattr(SqlAlchemyStore, "_engine_map", {}).get(uri)
    if engine is not None:
        engine.dispose()  # the next use connects again, by path: to the new store


def _set_aside(db: Path) -> Path:
    """Rename ``db`` (and its sqlite journal files) to ``<db>.broken-<time>``."""
    aside = db.with_name(f"{db.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("-journal", "-wal", "-shm", ""):
        source = db.with_name(db.name + suffix)
        if source.exists():
            os.replace(source, aside.with_name(aside.name + suffix))
    return aside
