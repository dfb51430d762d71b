"""One process at a time per comparison, sweep or run: an ``flock`` on the folder's ``running.lock``, or on a run's
checkpoint folder itself (which a refused resume must leave as it was), held by a run from when its MLflow run opens
and by ``raysim run --resume`` before it changes anything.

A second process on the same comparison would take the first's RUNNING cells for a killed comparison's and end them;
a second on the same sweep would write into the first's Tune experiment; a resume of a run that is still running, or
that another process is resuming, would prune its newer checkpoints. The kernel releases an ``flock`` when its
process ends, however it ends, so a crashed run needs nothing before it resumes. A filesystem that cannot ``flock`` a
folder (NFS, where a folder opens read-only; Lustre without ``-o flock``) leaves a run's folder unlocked, with a
warning."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raysim.base.errors import ConfigError

LOCK_FILE = "running.lock"
UNLOCKABLE = (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)  # no flock on a folder there
log = logging.getLogger("raysim")


@contextmanager
def sole_runner(folder: str | Path, what: str, resume: str, in_place: bool = False) -> Iterator[None]:
    """Hold ``folder``'s lock while the body runs, or stop at once with a one-line error that names the process
    holding it (``what`` names the comparison, sweep or run; ``resume`` says how to resume it). ``in_place``: lock
    the existing folder itself, creating nothing in it (the holder then goes unnamed)."""
    path = Path(folder) if in_place else Path(folder) / LOCK_FILE
    if not in_place:
        path.parent.mkdir(parents=True, exist_ok=True)
    held = os.open(path, os.O_RDONLY if in_place else os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = "" if in_place else os.pread(held, 200, 0).decode(errors="replace").strip()
            raise ConfigError(
                f"{what} is running in {holder or 'another process'} ({path}); wait for it to end, or stop it and "
                f"{resume}"
            ) from None
        except OSError as error:  # NFS (a folder opened read-only), Lustre without -o flock, some FUSE mounts
            if not in_place or error.errno not in UNLOCKABLE:
                raise
            log.warning("%s cannot be locked on its filesystem (%s): a second process is not refused", path, error)
        if not in_place:
            os.ftruncate(held, 0)
            os.pwrite(held, f"process {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(held)


def run_lock(folder: str | Path, run_id: str):
    """:func:`sole_runner` on run ``run_id``'s checkpoint folder itself, as a run and ``raysim run --resume`` hold
    it."""
    return sole_runner(folder, f"run {run_id}", f"resume it with: raysim run --resume {folder}", in_place=True)
