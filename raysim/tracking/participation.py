"""The run's participation record, ``participation.safetensors``: every client whose update a server step used, and
in how many rounds (``clients`` int64 and ``rounds`` int32, in client order). A sampled client that failed, missed
the deadline or was screened out is not in it; in asynchronous mode a round is a server version. Membership
inference reads it: the rows of these clients are the ones the model trained on (``raysim attack membership``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

PARTICIPATION = "participation.safetensors"


def save_participation(contributions: dict[int, int], folder: Path) -> Path:
    """``contributions`` (client -> rounds its update was used) saved as ``folder/participation.safetensors``."""
    clients = sorted(contributions)
    path = Path(folder) / PARTICIPATION
    save_file(
        {
            "clients": np.array(clients, dtype=np.int64),
            "rounds": np.array([contributions[c] for c in clients], dtype=np.int32),
        },
        str(path),
    )
    return path


def load_participation(path: Path) -> dict[int, int]:
    """The participation record at ``path``: client -> rounds its update was used."""
    tensors = load_file(str(path))
    return dict(zip(tensors["clients"].tolist(), tensors["rounds"].tolist(), strict=True))
