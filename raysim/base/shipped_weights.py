"""The backbone weights that ship with raysim (``raysim/models/weights``): each a safetensors file beside a JSON
sidecar with its SHA-256, the recipe that made it and the command that remakes it. Reading a sidecar needs no torch,
so a run's driver can record which weights a run starts from."""

from __future__ import annotations

import json
from pathlib import Path

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "models" / "weights"


def shipped_weights(name: str) -> dict | None:
    """The sidecar of weights that ship with raysim for ``name`` (file, sha256, recipe, command), if any."""
    sidecar = WEIGHTS_DIR / f"{name}.json"
    return json.loads(sidecar.read_text()) if sidecar.is_file() else None
