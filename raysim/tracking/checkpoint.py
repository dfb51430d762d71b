"""Checkpoints: the complete state of a run after a round, written atomically as safetensors + a JSON manifest.

A checkpoint is one folder ``<root>/<run id>/round-NNNNNN/`` holding ``state.safetensors`` (the global
tensors ``params/*`` and the server state ``server/*`` — momentum, selection counts, cluster state) and
``manifest.json`` (round, resolved config, MLflow run, the metrics and diagnostic records so far, the tensors
file's SHA-256, and where each client's persistent state is). Client states are incremental: a checkpoint writes
only the clients whose state changed since the previous one, as ``<root>/<run id>/clients/round-NNNNNN.safetensors``,
and its manifest maps every client to the file holding its latest state (files no kept checkpoint refers to are
removed). There is no RNG position to save: every random draw derives from (run seed, purpose, round, client)
(:mod:`raysim.base.seeding`), so round r + 1 of a resumed run draws exactly what the uninterrupted run drew.

Files are written under temporary names and renamed into place, so a crash never leaves a half-written checkpoint
under a ``round-*`` name; loading checks every file's SHA-256. Nothing here unpickles anything. torch loads with the
first tensor read or written: a Ray run's driver reads only manifests (``load(..., tensors=False)``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raysim.base.errors import ConfigError

if TYPE_CHECKING:
    from raysim.core.messages import GlobalState, Tensors

FORMAT = 2
TENSORS, MANIFEST, CLIENTS = "state.safetensors", "manifest.json", "clients"
PREFIX = "round-"
REPLACED = ".replaced"  # a round's checkpoint while a replayed round's replaces it
_KEYS = {"run_id", "round", "config", "tracking_uri", "sha256", "order", "history", "client_acc", "records"}
REQUIRED = {1: _KEYS, FORMAT: _KEYS | {"client_sha256"}}  # what a manifest of each format must hold


@dataclass
class Checkpoint:
    """Everything a run needs to continue after ``round`` exactly as if it had never stopped."""

    run_id: str
    round: int
    config: dict[str, Any]
    state: GlobalState | None  # None: read from ``folder`` where the tensors are needed (:func:`with_tensors`)
    client_states: dict[int, Tensors]
    tracking_uri: str
    history: list[dict[str, float]] = field(default_factory=list)
    client_acc: dict[int, float] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    folder: Path | None = None  # where it was loaded from (a round-* folder)
    client_files: dict[int, str] = field(default_factory=dict)  # client -> its state's file under clients/
    # client -> the rounds whose step used its update; None where the checkpoint does not record them
    contributions: dict[int, int] | None = field(default_factory=dict)

    @property
    def method(self) -> str:
        return self.config["method"]


def round_folder(run_folder: Path, round: int) -> Path:
    return Path(run_folder) / f"{PREFIX}{round:06d}"


def save(run_folder: str | Path, checkpoint: Checkpoint, client_files: dict[int, str] | None = None) -> Path:
    """Write ``checkpoint`` under ``run_folder`` atomically. Nothing older is removed here: the driver prunes
    (:func:`prune`) once it holds the round's report, so the checkpoint it would recover from is never the one gone.

    ``checkpoint.client_states`` are the states changed since the checkpoint whose client map is ``client_files``
    (None: they are every client's state); they go to one new file, and ``checkpoint.client_files`` becomes the map
    of every client to its latest file.
    """
    from safetensors.torch import save_file

    run_folder = Path(run_folder)
    run_folder.mkdir(parents=True, exist_ok=True)
    final = round_folder(run_folder, checkpoint.round)
    files = dict(client_files or {})
    if checkpoint.client_states:
        name = f"{final.name}.safetensors"
        if (run_folder / CLIENTS / name).exists():  # a replayed round: the checkpoint it replaces keeps its file
            name = f"{final.name}-{os.getpid()}-{time.time_ns()}.safetensors"
        tensors = {f"{c}/{k}": v for c, state in checkpoint.client_states.items() for k, v in state.items()}
        _write_atomic(run_folder / CLIENTS / name, detached(tensors))
        files.update({c: name for c in checkpoint.client_states})
    for left in run_folder.glob(f".partial-{final.name}-*"):  # this round's write, cut short by a killed process
        shutil.rmtree(left, ignore_errors=True)
    partial = run_folder / f".partial-{final.name}-{os.getpid()}"
    partial.mkdir()
    tensors = flattened(checkpoint.state)
    save_file(detached(tensors), str(partial / TENSORS), metadata={"format": str(FORMAT)})
    manifest = {
        "format": FORMAT,
        "run_id": checkpoint.run_id,
        "method": checkpoint.method,
        "round": checkpoint.round,
        "config": checkpoint.config,
        "tracking_uri": checkpoint.tracking_uri,
        "rng": "stateless: every draw derives from (run seed, purpose, round, client)",
        "sha256": _sha256(partial / TENSORS),
        "written_at": time.time(),
        "order": list(tensors),
        "history": checkpoint.history,
        "records": checkpoint.records,
        "client_acc": _str_keys(checkpoint.client_acc),
        **({} if checkpoint.contributions is None else {"contributions": _str_keys(checkpoint.contributions)}),
        "client_files": {str(c): name for c, name in sorted(files.items())},
        "client_sha256": {name: _client_sha256(run_folder / CLIENTS / name) for name in sorted(set(files.values()))},
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
    for path in (partial / TENSORS, partial / MANIFEST):
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    aside = final.with_name(final.name + REPLACED)
    if final.exists():  # a replayed round (rewind or recovery) replaces its checkpoint: the old one moves aside whole
        shutil.rmtree(aside, ignore_errors=True)  # (a rename), and stays a checkpoint until the new one is in
        os.replace(final, aside)
    os.replace(partial, final)
    shutil.rmtree(aside, ignore_errors=True)
    checkpoint.client_files = files
    return final


def prune(run_folder: str | Path, keep: int, confirmed: int) -> None:
    """Keep the ``keep`` newest checkpoints (0: all) of rounds up to ``confirmed``, the last round whose report the
    driver received. A newer one was written by a round whose report was lost (the coordinator died on its way back,
    or a stop abandoned it): the run goes on, or resumes, from ``confirmed`` and writes that round again, so its
    metrics are logged. Client-state files no kept checkpoint refers to go too."""
    kept = []
    for round, folder in sorted(_by_round(Path(run_folder)).items()):
        if round > confirmed:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            kept.append(folder)
    for old in kept[:-keep] if keep else ():
        shutil.rmtree(old, ignore_errors=True)
    _remove_unreferenced(Path(run_folder))


def flattened(state: GlobalState) -> Tensors:
    """``params/*`` and ``server/*`` in one dict, in order: what a checkpoint's (and a run's final) state file holds
    (:func:`_unflatten` is the inverse)."""
    tensors = {f"params/{k}": v for k, v in state.params.items()}
    tensors.update({f"server/{k}": v for k, v in state.server.items()})
    return tensors


def detached(tensors: Tensors) -> Tensors:
    """CPU copies that safetensors can write: contiguous, no storage shared between two of them."""
    return {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}  # clone: no shared storage


def _write_atomic(path: Path, tensors: Tensors) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    for left in path.parent.glob(f".partial-{path.name}-*"):  # the same file's write, cut short by a killed process
        left.unlink(missing_ok=True)
    partial = path.with_name(f".partial-{path.name}-{os.getpid()}")
    save_file(tensors, str(partial), metadata={"format": str(FORMAT)})
    with open(partial, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _remove_unreferenced(run_folder: Path) -> None:
    """Client-state files that no kept checkpoint refers to."""
    used = set()
    for folder in rounds_in(run_folder):
        try:
            used |= set(json.loads((folder / MANIFEST).read_text()).get("client_files", {}).values())
        except (OSError, ValueError):
            return  # an unreadable manifest: keep everything rather than guess
    for path in (run_folder / CLIENTS).glob("*.safetensors") if (run_folder / CLIENTS).is_dir() else ():
        if path.name not in used:
            path.unlink(missing_ok=True)


def rounds_in(run_folder: Path) -> list[Path]:
    """The complete checkpoint folders under ``run_folder``, oldest first: a round's, or where a process stopped
    while a replayed round replaced it (:func:`save`), the one it was replacing."""
    found = _by_round(Path(run_folder))
    return [found[n] for n in sorted(found)]


def _by_round(run_folder: Path) -> dict[int, Path]:
    """:func:`rounds_in`'s folders by their round."""
    found: dict[int, Path] = {}
    for path in sorted(run_folder.glob(f"{PREFIX}*")):  # round-N sorts before round-N.replaced
        number = path.name[len(PREFIX) :].removesuffix(REPLACED)
        if path.is_dir() and number.isdigit():
            found.setdefault(int(number), path)
    return found


def load(target: str | Path, clients: bool = True, tensors: bool = True) -> Checkpoint:
    """The checkpoint in folder ``target``: a ``round-*`` folder, or a run's folder (its newest checkpoint);
    ``clients=False`` leaves the clients' states on disk (the end of a run needs only the global state);
    ``tensors=False`` reads the manifest alone (``state`` None, no client states; the files are checked all the same:
    their SHA-256), and :func:`with_tensors` reads the rest where it is needed."""
    target = Path(target)
    folder = target
    if not (target / MANIFEST).is_file():
        found = rounds_in(target)
        if not found:
            raise ConfigError(
                f"{target} holds no checkpoint (no {PREFIX}*/{MANIFEST}); pass a run id or the "
                f"checkpoint folder printed when the run stopped"
            )
        folder = found[-1]
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") not in (1, FORMAT)
        or not isinstance(manifest.get("config"), dict)
        or not REQUIRED[manifest["format"]] <= set(manifest)
    ):
        raise ConfigError(
            f"{folder / MANIFEST} is not a raysim checkpoint manifest (format 1 or {FORMAT}); "
            f"pass another checkpoint folder"
        ) from None
    if not (folder / TENSORS).is_file() or _sha256(folder / TENSORS) != manifest["sha256"]:
        raise ConfigError(
            f"{folder / TENSORS} is missing or does not match the SHA-256 in its manifest; "
            f"resume from an earlier {PREFIX}* folder"
        )
    _check_safetensors(folder / TENSORS, frozenset(manifest["order"]))
    files = {int(c): name for c, name in manifest.get("client_files", {}).items()}
    clients_folder, state, states = folder.parent / CLIENTS, None, {}
    if clients and manifest["format"] != 1:
        _check_client_files(clients_folder, files, manifest["client_sha256"])
    if tensors:
        from safetensors.torch import load_file

        read = load_file(str(folder / TENSORS))
        state = _unflatten(read, [k for k in manifest["order"] if not k.startswith("client/")])
        if manifest["format"] == 1:  # every client's state inside state.safetensors, as client/<id>/<name>
            from raysim.core.messages import unprefixed

            states = _by_client(unprefixed(read, "client/"), None)
        elif clients:
            states = _client_states(clients_folder, files)
    return Checkpoint(
        run_id=manifest["run_id"],
        round=int(manifest["round"]),
        config=manifest["config"],
        state=state,
        client_states=states,
        tracking_uri=manifest["tracking_uri"],
        history=manifest["history"],
        client_acc={int(c): a for c, a in manifest["client_acc"].items()},
        records=manifest["records"],
        folder=folder,
        client_files=files,
        contributions=None
        if "contributions" not in manifest
        else {int(c): n for c, n in manifest["contributions"].items()},
    )


def with_tensors(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` with its tensors: as it is, or read from its folder (every client's state too) when it was
    loaded with ``tensors=False``."""
    return checkpoint if checkpoint.state is not None else load(checkpoint.folder)


def _check_client_files(folder: Path, files: dict[int, str], hashes: dict[str, str]) -> None:
    """Every client-state file the manifest names is there, matches its SHA-256 and is safetensors (not which tensors
    it holds: a client's state may hold none)."""
    for name in sorted(set(files.values())):
        path = folder / name
        if not path.is_file() or _sha256(path) != hashes.get(name):
            raise ConfigError(
                f"{path} is missing or does not match the SHA-256 in the manifest; resume from an "
                f"earlier {PREFIX}* folder"
            )
        _check_safetensors(path)


def _check_safetensors(path: Path, wanted: frozenset[str] = frozenset()) -> None:
    """``path`` is a safetensors file holding every tensor named in ``wanted``, read from its header alone, without
    torch: a file that matches its hash but not what its manifest says is refused here, in one line, before a run
    is reopened."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            names = set(handle.keys())
    except (SafetensorError, OSError) as error:
        raise ConfigError(
            f"{path} is not a readable safetensors file ({error}); resume from an earlier {PREFIX}* folder"
        ) from None
    missing = sorted(wanted - names)
    if missing:
        raise ConfigError(
            f"{path} lacks {len(missing)} tensor(s) its manifest names ({', '.join(missing[:3])}); resume from "
            f"an earlier {PREFIX}* folder"
        )


def _client_states(folder: Path, files: dict[int, str]) -> dict[int, Tensors]:
    """Each client's state from the file the manifest names for it (checked by :func:`_check_client_files`), in
    client order; a client that kept no tensor (an empty state, which writes none) keeps its empty state."""
    from safetensors.torch import load_file

    states: dict[int, Tensors] = {client: {} for client in files}
    for name in sorted(set(files.values())):
        states.update(_by_client(load_file(str(folder / name)), {c for c, f in files.items() if f == name}))
    return dict(sorted(states.items()))


def _str_keys(by_client: dict[int, Any]) -> dict[str, Any]:
    """A per-client table as JSON keeps it: client ids as strings, in client order."""
    return {str(c): value for c, value in sorted(by_client.items())}


def _by_client(tensors: Tensors, wanted: set[int] | None) -> dict[int, Tensors]:
    """``<client>/<name>`` tensors as {client: {name: tensor}}, for the ``wanted`` clients (None: all)."""
    states: dict[int, Tensors] = {}
    for key, value in tensors.items():
        client, name = key.split("/", 1)
        if wanted is None or int(client) in wanted:
            states.setdefault(int(client), {})[name] = value
    return states


def _unflatten(tensors: Tensors, order: list[str]) -> GlobalState:
    """Back to dicts in the order they were saved (aggregation and byte counts then see the same order)."""
    from raysim.core.messages import GlobalState

    params, server = {}, {}
    for key in order:
        kind, rest = key.split("/", 1)
        (params if kind == "params" else server)[rest] = tensors[key]
    return GlobalState(params=params, server=server)


def _client_sha256(path: Path) -> str:
    """A client-state file's SHA-256, read once: every later checkpoint that refers to the unchanged file (its size
    and modification time the same) reuses it."""
    stat = path.stat()
    return _sha256_once(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _sha256_once(path: str, size: int, mtime_ns: int) -> str:
    return _sha256(Path(path))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
