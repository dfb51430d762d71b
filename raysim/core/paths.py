"""Whether a folder a run will write in can be written, checked before the run exists (creates nothing that stays)."""

from __future__ import annotations

import tempfile
from pathlib import Path


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
