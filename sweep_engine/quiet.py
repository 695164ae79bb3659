"""What a sweep shows of Ray, Tune and MLflow: what a user can act on; ``--verbose`` shows all.

Each source silenced here, and why it tells a sweep's user nothing (Ray 2.60, MLflow 3):

- Ray's ``Token authentication is enabled for this Ray cluster`` WARNING
  (``ray/_private/authentication/authentication_token_setup.py``): token authentication is
  on by design (docs/fault-tolerance.md, "Isolation and Ray authentication"); Ray warns
  whenever it turns it on by itself. Only that message is filtered: its "is disabled"
  warning (a cluster started without a token) still shows, because that one the user
  should act on.
- Ray's INFO lines (``Started a local Ray instance.``, ``Connecting to existing Ray
  cluster``, Tune's ``Wrote the latest version of all result files and experiment state``):
  the ``ray`` logger is set to WARNING (``ray.init(logging_level=...)`` does the same at
  start), so a failed trial, a lost node or a worker crash still prints.
- Tune's ``Configuration for experiment`` box and ``View detailed results here``: Tune's
  new output engine prints both whatever ``RunConfig(verbose=0)`` says
  (``ray/tune/experimental/output.py``, ``TuneTerminalReporter.experiment_started``).
  ``RAY_AIR_NEW_OUTPUT=0`` selects its legacy engine, which at verbosity 0 prints nothing.
  The folder it names is Tune's own state (``<sweep>/_tune``); records are the sink's.
- MLflow's ``Creating initial MLflow database tables...`` / ``Updating database tables``
  INFO (``mlflow.store.db.utils``): the default sqlite store is created in the results
  folder on first use, by design.
- Optuna's ``A new study created in memory with name: optuna`` INFO, once per search cell:
  Tune's OptunaSearch makes an in-memory study by design (``search.py`` says why no Optuna
  storage). The ``optuna`` logger keeps WARNING; Optuna sets its level when imported, so
  ``search.py`` calls ``configure`` again after importing it.

Not silenced: anything at WARNING or above from Ray/Tune besides the first item (a trial's
traceback, ``Trials did not complete``), errors Ray pushes to the driver (a worker or node
died), and MLflow's warnings. The end-of-run ``FileNotFoundError`` traceback of Tune's
experiment-state upload had a cause, fixed in ``tune_state.py``, not silenced here.
"""

from __future__ import annotations

import logging
import os
import sys

VERBOSE = False  # --verbose: Ray, Tune and MLflow speak as they do by default
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_ENABLED = "Token authentication is enabled for this Ray cluster"
_MLFLOW_DB_LOGGER = "mlflow.store.db.utils"
_NEW_OUTPUT = "RAY_AIR_NEW_OUTPUT"
_we_set_new_output = False


class _DropTokenAuthEnabled(logging.Filter):
    """Drops Ray's notice that it turned token authentication on (see the module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_AUTH_ENABLED)


_AUTH_FILTER = _DropTokenAuthEnabled()


def configure(verbose: bool = False) -> None:
    """Quiet (the default) or ``verbose``; call again to switch. Before ``ray.init`` and
    ``Tuner.fit``: the first reads ``ray_logging_level``, the second Tune's output env."""
    global VERBOSE, _we_set_new_output
    VERBOSE = verbose
    auth = logging.getLogger(_AUTH_LOGGER)
    if verbose:
        auth.removeFilter(_AUTH_FILTER)
        logging.getLogger(_MLFLOW_DB_LOGGER).setLevel(logging.NOTSET)
        if _we_set_new_output:
            os.environ.pop(_NEW_OUTPUT, None)
            _we_set_new_output = False
    else:
        auth.addFilter(_AUTH_FILTER)  # idempotent: a logger holds a filter once
        logging.getLogger(_MLFLOW_DB_LOGGER).setLevel(logging.WARNING)
        if _NEW_OUTPUT not in os.environ:  # a user's own choice stays
            os.environ[_NEW_OUTPUT] = "0"
            _we_set_new_output = True
    # also for a Ray this process joined already (tests): ray.init would set it at start
    logging.getLogger("ray").setLevel(ray_logging_level())
    if "optuna" in sys.modules:  # INFO is Optuna's own default
        logging.getLogger("optuna").setLevel(logging.INFO if verbose else logging.WARNING)


def ray_logging_level() -> int:
    """The driver's ``ray`` logger level: INFO (Ray's default) when verbose."""
    return logging.INFO if VERBOSE else logging.WARNING


def log_to_driver() -> bool:
    """Whether workers' own stdout/stderr reach the driver: only when verbose (a party's
    prints are not the sweep's output; errors Ray pushes to the driver show either way)."""
    return VERBOSE


def tune_verbosity() -> int:
    """``RunConfig(verbose=...)``: 1 (Tune's default: a status table now and then) or 0."""
    return 1 if VERBOSE else 0
