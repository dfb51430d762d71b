"""Bookkeeping for the parquet decode cache: where a data set's decoded copy lives, and removing copies nothing can
read any more.

A decoded copy (``parquet-<key>.npy`` in the data cache) is keyed by its files' paths, sizes, modification times
and status-change times (which no copy or archive tool can set back, as ``cp -p`` sets the modification time), and by
the decoder (the source's decoding and the Pillow release), so a rewritten or deleted parquet file is
never read through its old copy, and that copy, as large as the decoded images, would stay on disk for good. Each
copy therefore carries a note of its files and decoder (``parquet-<key>.json``) and its rows' digests
(``parquet-<key>.digests``, :mod:`raysim.data.row_digests`); reading any parquet data set removes the copies whose
files changed or are gone, or that another decoder wrote, and the data set's own copies of other files than its
folder now holds. A copy a process has mapped (:func:`hold`: the run's driver, as long as it lives) is kept until no
process holds it, so a run never loses the rows it trains on to another run's clean-up.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import uuid
from pathlib import Path

from raysim.base.owned_files import abandoned, owner_tag

log = logging.getLogger("raysim")

Stamp = list[list]  # [absolute path, size in bytes, modification time in ns, status-change time in ns] per file
_held: dict[Path, object] = {}  # the copies this process reads, each with its lock file open (a shared flock)


def lock_path(copy: Path) -> Path:
    return copy.with_suffix(".lock")


def hold(copy: Path) -> None:
    """Mark ``copy`` in use for as long as this process lives (a shared ``flock`` on its lock file, which the kernel
    drops when the process ends, however it ends): :func:`prune` in another run leaves it."""
    if copy in _held:
        return
    try:
        lock = open(lock_path(copy), "a")  # noqa: SIM115 - held open for the process's lifetime
    except OSError as error:  # a cache shared read-only: no run here can remove the copy either
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        return
    fcntl.flock(lock, fcntl.LOCK_SH)
    _held[copy] = lock


def _remove_unused(copy: Path) -> bool:
    """Remove ``copy``, its rows' digests, note and lock file unless a process holds it (:func:`hold`): under an
    exclusive ``flock``, so a process that opens the lock file meanwhile waits, then finds the copy gone."""
    try:
        lock = open(lock_path(copy), "a")  # noqa: SIM115 - closed below, after the removal
    except OSError:
        return False
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        copy.unlink(missing_ok=True)
        copy.with_suffix(".digests").unlink(missing_ok=True)  # its rows' digests (raysim.data.row_digests)
        copy.with_suffix(".json").unlink(missing_ok=True)
        lock_path(copy).unlink(missing_ok=True)
    return True


def stamp(files: list[str]) -> Stamp:
    """What identifies ``files``' contents without reading them."""
    stamped = []
    for file in sorted(os.path.abspath(f) for f in files):
        status = os.stat(file)
        stamped.append([file, status.st_size, status.st_mtime_ns, status.st_ctime_ns])
    return stamped


def copy_path(folder: Path, files: Stamp, *version) -> Path:
    """The decoded copy of ``files`` in ``folder``; ``version``: whatever else changes the decoded images (the
    resize, the decoder's version)."""
    key = hashlib.sha256(json.dumps([files, *version]).encode()).hexdigest()[:16]
    return folder / f"parquet-{key}.npy"


def note(copy: Path, files: Stamp, decoder: list, source: str) -> None:
    """Record which files ``copy`` was decoded from, the data set (``data.data_dir``, absolute) they were listed from
    and by which ``decoder`` (before the copy takes its name, so no copy is without one)."""
    partial = copy.with_name(f".{copy.stem}.{uuid.uuid4().hex}.json")
    partial.write_text(json.dumps({"files": files, "decoder": decoder, "source": source}))
    os.replace(partial, copy.with_suffix(".json"))


def partial_path(copy: Path) -> Path:
    """Where ``copy`` is written before it takes its name, named by the writing process and host: :func:`prune` tells
    a write cut short (its process gone) from one under way."""
    return copy.with_name(f".{copy.name}.{owner_tag()}")


def prune(folder: Path, decoder: list, source: str, listed: Stamp) -> None:
    """Remove every decoded copy in ``folder`` whose files changed or are gone, or that another ``decoder`` (the
    source's decoding, the Pillow release) wrote, or of the data set ``source`` from other files than it now lists
    (``listed``: a file added to its folder), with its note: no run reads those again. Copies written before notes
    existed are left alone (nothing says what they came from). Partial copies whose writer on this host is gone
    (killed mid-decode) go too."""
    _remove_cut_short(folder)
    for recorded in folder.glob("parquet-*.json"):
        try:
            written = json.loads(recorded.read_text())
            files = written["files"]
            current = stamp([file[0] for file in files])
        except FileNotFoundError:
            current = None  # a file is gone (or the note was removed by another run's prune)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        superseded = written.get("source") == source and files != listed
        if current == files and written.get("decoder") == decoder and not superseded:
            continue
        copy = recorded.with_suffix(".npy")
        size = copy.stat().st_size if copy.exists() else 0
        if not _remove_unused(copy):
            log.info("kept %s: a running process reads it; a later read removes it once none does", copy)
            continue
        log.info(
            "removed %s (%.0f MB): its parquet files changed, went or were joined by others, or its decoder changed",
            copy,
            size / 1e6,
        )


def _remove_cut_short(folder: Path) -> None:
    for partial in abandoned(folder, ".parquet-*.npy.*", lambda name: name.split(".npy.", 1)[1]):
        size = partial.stat().st_size if partial.exists() else 0
        partial.unlink(missing_ok=True)
        log.info("removed %s (%.0f MB): a decode its killed process left", partial, size / 1e6)
