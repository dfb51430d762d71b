"""One process at a time per comparison, sweep or resumed run folder: an ``flock`` on the folder's ``running.lock``.

A second process on the same comparison would take the first's RUNNING cells for a killed comparison's and end them;
a second on the same sweep would write into the first's Tune experiment; a second resume of a run would prune the
first's newer checkpoints. The kernel releases an ``flock`` when its
process ends, however it ends, so a crashed run needs nothing before it resumes."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raysim.base.errors import ConfigError

LOCK_FILE = "running.lock"


@contextmanager
def sole_runner(folder: str | Path, what: str, resume: str) -> Iterator[None]:
    """Hold ``folder``'s lock while the body runs, or stop at once with a one-line error that names the process
    holding it (``what`` names the comparison, sweep or run; ``resume`` says how to resume it)."""
    path = Path(folder) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            holder = held.read().strip() or "another process"
            raise ConfigError(
                f"{what} is running in {holder} ({path}); wait for it to end, or stop it and {resume}"
            ) from None
        held.truncate(0)
        held.write(f"process {os.getpid()}")
        held.flush()
        yield
