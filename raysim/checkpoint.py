"""Checkpoints: the complete state of a run after a round, written atomically as safetensors + a JSON manifest.

A checkpoint is one folder ``<root>/<run id>/round-NNNNNN/`` holding ``state.safetensors`` (the global
tensors ``params/*``, the server state ``server/*`` — momentum, selection counts, cluster state — and every
client's persistent state ``client/<id>/*``) and ``manifest.json`` (round, resolved config, MLflow run, the
metrics and diagnostic records so far, and the tensors file's SHA-256). There is no RNG position to save:
every random draw derives from (run seed, purpose, round, client) (:mod:`raysim.seeding`), so round r + 1 of
a resumed run draws exactly what the uninterrupted run drew.

The folder is written under a temporary name and renamed into place, so a crash never leaves a half-written
checkpoint under a ``round-*`` name; loading checks the hash. Nothing here unpickles anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from raysim.errors import ConfigError
from raysim.method import GlobalState, Tensors

FORMAT = 1
TENSORS, MANIFEST = "state.safetensors", "manifest.json"
PREFIX = "round-"


@dataclass
class Checkpoint:
    """Everything a run needs to continue after ``round`` exactly as if it had never stopped."""

    run_id: str
    round: int
    config: dict[str, Any]
    state: GlobalState
    client_states: dict[int, Tensors]
    tracking_uri: str
    history: list[dict[str, float]] = field(default_factory=list)
    client_acc: dict[int, float] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    folder: Path | None = None  # where it was loaded from (a round-* folder)

    @property
    def method(self) -> str:
        return self.config["method"]


def round_folder(run_folder: Path, round: int) -> Path:
    return Path(run_folder) / f"{PREFIX}{round:06d}"


def save(run_folder: str | Path, checkpoint: Checkpoint, keep: int) -> Path:
    """Write ``checkpoint`` under ``run_folder`` atomically, then keep only the ``keep`` newest (0: all)."""
    run_folder = Path(run_folder)
    run_folder.mkdir(parents=True, exist_ok=True)
    final = round_folder(run_folder, checkpoint.round)
    partial = run_folder / f".partial-{final.name}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    tensors = _flatten(checkpoint.state, checkpoint.client_states)
    save_file(tensors, str(partial / TENSORS), metadata={"format": str(FORMAT)})
    manifest = {
        "format": FORMAT, "run_id": checkpoint.run_id, "method": checkpoint.method, "round": checkpoint.round,
        "config": checkpoint.config, "tracking_uri": checkpoint.tracking_uri,
        "rng": "stateless: every draw derives from (run seed, purpose, round, client)",
        "sha256": _sha256(partial / TENSORS), "written_at": time.time(), "order": list(tensors),
        "history": checkpoint.history, "records": checkpoint.records,
        "client_acc": {str(c): a for c, a in checkpoint.client_acc.items()},
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
    for path in (partial / TENSORS, partial / MANIFEST):
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    shutil.rmtree(final, ignore_errors=True)  # a replayed round (rewind or recovery) replaces its checkpoint
    os.replace(partial, final)
    if keep:
        for old in rounds_in(run_folder)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def rounds_in(run_folder: Path) -> list[Path]:
    """The complete checkpoint folders under ``run_folder``, oldest first."""
    found = [p for p in Path(run_folder).glob(f"{PREFIX}*") if p.is_dir() and p.name[len(PREFIX):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def load(target: str | Path) -> Checkpoint:
    """The checkpoint in folder ``target``: a ``round-*`` folder, or a run's folder (its newest checkpoint)."""
    target = Path(target)
    folder = target
    if not (target / MANIFEST).is_file():
        found = rounds_in(target)
        if not found:
            raise ConfigError(f"{target} holds no checkpoint (no {PREFIX}*/{MANIFEST}); pass a run id or the "
                              f"checkpoint folder printed when the run stopped")
        folder = found[-1]
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("config"), dict):
        raise ConfigError(f"{folder / MANIFEST} is not a raysim checkpoint manifest (format {FORMAT}); "
                          f"pass another checkpoint folder") from None
    if not (folder / TENSORS).is_file() or _sha256(folder / TENSORS) != manifest["sha256"]:
        raise ConfigError(f"{folder / TENSORS} is missing or does not match the SHA-256 in its manifest; "
                          f"resume from an earlier {PREFIX}* folder")
    state, client_states = _unflatten(load_file(str(folder / TENSORS)), manifest["order"])
    return Checkpoint(
        run_id=manifest["run_id"], round=int(manifest["round"]), config=manifest["config"], state=state,
        client_states=client_states, tracking_uri=manifest["tracking_uri"], history=manifest["history"],
        client_acc={int(c): a for c, a in manifest["client_acc"].items()}, records=manifest["records"],
        folder=folder)


def _flatten(state: GlobalState, client_states: dict[int, Tensors]) -> Tensors:
    out = {f"params/{k}": v for k, v in state.params.items()}
    out.update({f"server/{k}": v for k, v in state.server.items()})
    for client, tensors in client_states.items():
        out.update({f"client/{client}/{k}": v for k, v in tensors.items()})
    return {k: v.detach().cpu().contiguous().clone() for k, v in out.items()}  # clone: no shared storage


def _unflatten(tensors: Tensors, order: list[str]) -> tuple[GlobalState, dict[int, Tensors]]:
    """Back to dicts in the order they were saved (aggregation and byte counts then see the same order)."""
    params, server, clients = {}, {}, {}
    for key in order:
        value = tensors[key]
        kind, rest = key.split("/", 1)
        if kind == "params":
            params[rest] = value
        elif kind == "server":
            server[rest] = value
        else:
            client, name = rest.split("/", 1)
            clients.setdefault(int(client), {})[name] = value
    return GlobalState(params=params, server=server), clients


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
