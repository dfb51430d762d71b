"""Where a run reads and writes: paths made absolute, the file of a SQLite store, and whether a folder can be written
and will outlive the command, checked before the run exists (creates nothing that stays)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # what Ray gives a job's entrypoint: its runtime env, as JSON
SQLITE = "sqlite:///"


def absolute(path: str | Path) -> str:
    """``path`` with ``~`` expanded, made absolute (symbolic links resolved)."""
    return str(Path(path).expanduser().resolve())


def lower_scheme(uri: str) -> str:
    """``uri`` with its scheme in lower case (``HTTPS://host`` -> ``https://host``), as URL parsers read it; a path
    without a scheme unchanged."""
    scheme, separator, rest = uri.partition("://")
    return f"{scheme.lower()}{separator}{rest}" if separator else uri


def sqlite_file(uri: str) -> Path | None:
    """The file of a SQLite MLflow store (``sqlite:///PATH``); None for another store (a server)."""
    return Path(uri[len(SQLITE) :]) if uri.startswith(SQLITE) else None


def unwritable(folder: str | Path) -> Path | None:
    """Where ``folder`` cannot be written: the folder itself, or the nearest existing folder above it in which it
    cannot be created (or an existing file in its way); None where it can. Probes with a folder it removes."""
    folder = Path(folder).expanduser().absolute()
    existing = next(p for p in [folder, *folder.parents] if p.exists())
    if not existing.is_dir():
        return existing
    try:
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError:
        return existing
    return None


def ray_job_working_dir() -> Path | None:
    """The working directory of the Ray job this process is the entrypoint of, where Ray made it from the job's
    ``--working-dir`` (an unpacked copy that Ray deletes when the job ends); None otherwise."""
    try:
        runtime_env = json.loads(os.environ.get(RAY_JOB_CONFIG) or "{}").get("runtime_env") or {}
    except (ValueError, AttributeError):
        return None
    return Path.cwd().resolve() if runtime_env.get("working_dir") else None


def why_not_a_file(path: str | Path, error: OSError | None = None) -> str:
    """Why ``path``, which is not a readable file, cannot be read as one (``error``: what reading it raised): for a
    one-line error after its name."""
    if Path(path).is_dir():
        return "is a folder, not a file"
    if not Path(path).exists():
        return "does not exist"
    if error is None:  # it exists, and is neither a folder nor a regular file (a socket, a device)
        return "is not a regular file"
    return f"cannot be read ({error.strerror or type(error).__name__})"
