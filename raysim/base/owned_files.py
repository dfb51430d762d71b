"""Files named by the process that writes them and its machine, so that one a killed process left (SIGKILL, the
OOM killer) can be told from one still in use and removed: the shards' blocks, the decode cache's partial copies."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path


def owner_tag() -> str:
    """``PID-UNIQUE-HOST``: this process, a unique part, this machine (a shared home folder holds other machines'
    files, whose processes are not seen here)."""
    return f"{os.getpid()}-{uuid.uuid4().hex}-{socket.gethostname()}"


def owner_gone(tag: str) -> bool:
    """Whether the process an :func:`owner_tag` names has ended: only one of this machine can be seen to have."""
    pid, _, host = (tag.split("-", 2) + ["", ""])[:3]
    return host == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


def abandoned(folder: Path, pattern: str, tag_of: Callable[[str], str]) -> list[Path]:
    """The files or folders in ``folder`` matching the glob ``pattern`` whose owner, the :func:`owner_tag` that
    ``tag_of`` reads off a name, is gone."""
    return [path for path in folder.glob(pattern) if owner_gone(tag_of(path.name))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
