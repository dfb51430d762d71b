"""A resumed sweep without Tune's "Error handling checkpoint" traceback for a checkpoint that is already gone.

Tune keeps a trial's last ``num_to_keep`` checkpoints: registering a new one deletes the oldest at once, and the
experiment state that lists them is saved only now and then. A sweep stopped between the two (Ctrl-C, a killed
process) lists a checkpoint that is no longer on disk; after ``raysim tune --resume`` the trial's next checkpoint
makes Tune delete it again, and Ray 2.60 raises ``FileNotFoundError`` there
(``ray.train._internal.storage._delete_fs_path`` looks the path up outside its ``try``). Tune catches it and the
trial goes on, but the user sees a traceback that reads like a failure. The callback below forgets such checkpoints
just before Tune registers the next one (Tune calls ``on_checkpoint`` first).
"""

from __future__ import annotations

import pyarrow.fs
from ray import tune


def exists(checkpoint: tune.Checkpoint) -> bool:
    """Whether the checkpoint's folder is still there, on whichever filesystem it was written to."""
    return checkpoint.filesystem.get_file_info(checkpoint.path).type != pyarrow.fs.FileType.NotFound


class ForgetLostCheckpoints(tune.Callback):
    """Drops from a trial's kept checkpoints those whose folders are gone, before Tune registers its next one."""

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        manager = trial.run_metadata.checkpoint_manager
        kept = getattr(manager, "_checkpoint_results", None)  # Tune's own list (private): left alone if it moved
        if isinstance(kept, list):
            kept[:] = [result for result in kept if exists(result.checkpoint)]
