"""The papers' datasets that have one stable public archive, downloaded into the data cache (``raysim data fetch
NAME``, or the first run that reads one without ``--data-dir``), checked against a pinned SHA-256 and unpacked there.

The archive is written to ``<cache>/downloads/<file>.part`` (an interrupted download resumes from there with an HTTP
Range request), renamed to ``<file>`` when complete, checked, and unpacked into a temporary folder beside it that is
renamed to ``<cache>/downloads/<folder>`` only when complete; then the archive is removed. An archive already at
``<cache>/downloads/<file>`` (copied there by hand) is checked and unpacked without a download.
``$RAYSIM_DATA_MIRROR`` (a base URL) replaces each archive's origin: ``<mirror>/<file>``, checked against the same
SHA-256; every function also takes the table of archives as an argument.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from raysim.base.errors import ConfigError
from raysim.base.owned_files import abandoned, owner_tag
from raysim.base.paths import lower_scheme
from raysim.data.sources import cache_dir

MIRROR_ENV = "RAYSIM_DATA_MIRROR"
ATTEMPTS = 3  # requests per download while each one gets further than the last
CHUNK_BYTES = 2**20
TIMEOUT_S = 60  # per connection and read


@dataclass(frozen=True)
class Archive:
    """A dataset's public archive: where it is, its size in bytes and SHA-256, the folder it unpacks to and the file
    in that folder the dataset's reader looks for (the marker ``Layout.root`` checks in ``raysim.data.real``)."""

    url: str
    size: int
    sha256: str
    folder: str
    marker: str

    @property
    def file(self) -> str:
        return self.url.rsplit("/", 1)[-1]


# Sizes and SHA-256 of CIFAR-10/100: TensorFlow Datasets' pinned checksums ("URL SIZE SHA256"), github.com/tensorflow/
# datasets, tensorflow_datasets/url_checksums/cifar10.txt and cifar100.txt. Tiny-ImageNet: the size is the git-annex
# key of github.com/datasets-mila/datasets--tinyimagenet (MD5E-s248100043--90528d7ca1a48142e341f4ef8d21d0de.zip, the
# MD5 torchvision-style loaders pin), the SHA-256 the Git LFS pointer of the same-sized tiny-imagenet-200.zip in
# huggingface.co/datasets/cnak47/cv-datasets (commit 6931f66584bf3a507711a644f6803fa5f419faf1, whose
# cifar-10-python.tar.gz there matches TensorFlow Datasets' SHA-256 of the original). Public projects that download
# tiny-imagenet-200.zip from cs231n.stanford.edu and check it pin the same SHA-256 (six independent files in a code
# search of 2026-12-06, one of them recording the official archive's 248,100,043 bytes beside it).
ARCHIVES: dict[str, Archive] = {
    "cifar10": Archive(
        "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
        170_052_171,
        "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
        "cifar-10-batches-bin",
        "data_batch_1.bin",
    ),
    "cifar100": Archive(
        "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
        168_513_733,
        "58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec",
        "cifar-100-binary",
        "train.bin",
    ),
    "tiny-imagenet": Archive(
        "http://cs231n.stanford.edu/tiny-imagenet-200.zip",
        248_100_043,
        "6198c8ae015e2b3e007c7841da39ec069199b9aa3bfa943a462022fe5e43c821",
        "tiny-imagenet-200",
        "wnids.txt",
    ),
}


class DownloadFailed(ConfigError):
    """The archive could not be downloaded (offline, refused, cut off too often); the message says what to download,
    its SHA-256 and where to put it."""


def downloads() -> Path:
    """Where archives are downloaded and unpacked: ``<data cache>/downloads``."""
    return cache_dir() / "downloads"


def url_of(archive: Archive) -> str:
    """The archive's URL, or ``$RAYSIM_DATA_MIRROR/<file>`` where that is set."""
    mirror = os.environ.get(MIRROR_ENV)
    if mirror and not lower_scheme(mirror).startswith(("http://", "https://", "file://")):
        raise ConfigError(f"{MIRROR_ENV}={mirror} is not a URL; set it to one, e.g. https://mirror.example/datasets")
    return f"{mirror.rstrip('/')}/{archive.file}" if mirror else archive.url


def fetch(name: str, archives: dict[str, Archive] = ARCHIVES) -> Path:
    """Dataset ``name``'s unpacked folder in the data cache, downloaded, checked and unpacked first where it is not
    there yet (one process at a time: another one waits, then finds it there)."""
    if name not in archives:
        raise ConfigError(
            f"dataset {name!r} has no public archive raysim can fetch; fetchable: {', '.join(sorted(archives))} "
            "(where to get the others: docs/datasets.md)"
        )
    archive, home = archives[name], downloads()
    target = home / archive.folder
    if (target / archive.marker).is_file():
        return target
    home.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    with _locked(home / f".{archive.file}.lock"):
        if (target / archive.marker).is_file():
            return target
        path = home / archive.file
        if not path.is_file():
            _download(archive, path, console)
        _check(path, archive)
        _unpack(path, archive, target)
        path.unlink()
    console.print(f"raysim: {name} unpacked into {target}", highlight=False, soft_wrap=True)
    return target


@contextlib.contextmanager
def _locked(path: Path):
    with path.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _download(archive: Archive, path: Path, console: Console) -> None:
    """Download the archive to ``path`` through ``<path>.part``, resuming what an earlier attempt left there."""
    url, part = url_of(archive), path.with_name(path.name + ".part")
    if _size(part) > archive.size:
        part.unlink()
    columns = (TextColumn(archive.file), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("", total=archive.size)
        answered = False

        def report(done: int, total: int) -> None:
            nonlocal answered
            if not answered:  # said once the server answers, so that a failure to connect is the error's line alone
                answered = True
                size = f"{total / 1e6:.1f} MB" + (f", resumed at {done / 1e6:.1f} MB" if done else "")
                console.print(f"raysim: downloading {url} ({size}) into {path.parent}", highlight=False, soft_wrap=True)
            progress.update(task, completed=done, total=total)

        for attempt in range(1, ATTEMPTS + 1):
            before = _size(part)
            try:
                if before < archive.size:
                    _get(url, part, archive.size, report)
                break
            except (OSError, http.client.HTTPException) as error:  # URLError and a cut connection are OSErrors
                if attempt == ATTEMPTS or _size(part) <= before:
                    raise DownloadFailed(_failure(url, archive, path, error)) from None
    os.replace(part, path)


def _get(url: str, part: Path, size: int, report) -> None:
    """One request for the rest of ``part`` (a Range request where it holds bytes), starting over where the server
    sends the whole file instead; ``report(done, total)`` follows the bytes on disk."""
    have = _size(part)
    try:
        response = _open(url, have)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not have:  # 416: the range starts past the server's file, so the part is not its start
            raise
        part.unlink()
        have = 0
        response = _open(url, have)
    with response:
        resumed = response.status == 206 and response.headers.get("Content-Range", "").startswith(f"bytes {have}-")
        if not resumed:
            have = 0  # the server ignored the Range: the body is the whole file
        length = response.headers.get("Content-Length")
        total = have + int(length) if length else size
        report(have, total)
        with part.open("ab" if have else "wb") as out:
            while chunk := response.read(CHUNK_BYTES):
                out.write(chunk)
                have += len(chunk)
                report(have, total)
    if have < total:
        raise ConnectionError(f"the connection closed after {have:,} of {total:,} bytes")


def _open(url: str, start: int):
    """The response to a GET of ``url`` from byte ``start`` on."""
    headers = {"Range": f"bytes={start}-"} if start else {}
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _failure(url: str, archive: Archive, path: Path, error: Exception) -> str:
    """The one line for a download that failed: why, and how to finish it by hand."""
    if isinstance(error, urllib.error.HTTPError):
        reason = f"HTTP {error.code} {error.reason}"
    elif isinstance(error, urllib.error.URLError):
        reason = f"{type(error.reason).__name__}: {error.reason}"
    else:
        reason = f"{type(error).__name__}: {error}"
    kept = _size(path.with_name(path.name + ".part"))
    resume = f"; {kept:,} bytes are kept, and running again resumes" if kept else ""
    return (
        f"could not download {url} ({' '.join(reason.split())}){resume}; to finish by hand, download it "
        f"({archive.size:,} bytes, SHA-256 {archive.sha256}) to {path} and run again (which checks and unpacks it), "
        "or unpack it anywhere and pass --data-dir"
    )


def _check(path: Path, archive: Archive) -> None:
    """The archive's SHA-256 must be the pinned one; a file that differs is removed."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
    if digest.hexdigest() != archive.sha256:
        path.unlink()
        raise ConfigError(
            f"{path} has SHA-256 {digest.hexdigest()}, not the expected {archive.sha256} (a damaged download or a "
            f"changed file at {url_of(archive)}); it was removed: run again to download it afresh"
        )


def _unpack(path: Path, archive: Archive, target: Path) -> None:
    """Unpack ``path`` into a temporary folder beside ``target``, then move its ``archive.folder`` to ``target``; the
    temporary folders of unpackings whose process was killed go first."""
    prefix = f".{archive.folder}."
    for left in abandoned(target.parent, f"{prefix}*", lambda name: name[len(prefix) :]):
        shutil.rmtree(left, ignore_errors=True)
    staging = target.parent / f"{prefix}{owner_tag()}"
    staging.mkdir()
    try:
        try:
            if path.suffix == ".zip":
                _unzip(path, staging)
            else:
                with tarfile.open(path) as tar:
                    tar.extractall(staging, filter="data")  # refuses absolute paths, .. and links out of staging
        except (tarfile.TarError, zipfile.BadZipFile) as error:
            raise ConfigError(f"{path} cannot be unpacked ({type(error).__name__}: {error})") from None
        unpacked = staging / archive.folder
        if not (unpacked / archive.marker).is_file():
            raise ConfigError(f"{path} holds no {archive.folder}/{archive.marker}; is it the archive of {archive.url}?")
        shutil.rmtree(target, ignore_errors=True)  # a copy without its marker, damaged by hand
        os.rename(unpacked, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _unzip(path: Path, into: Path) -> None:
    """Extract a zip whose every member stays inside ``into``."""
    root = into.resolve()
    with zipfile.ZipFile(path) as zipped:
        for member in zipped.namelist():
            if not (root / member).resolve().is_relative_to(root):
                raise ConfigError(f"{path} holds {member!r}, which would unpack outside its folder; not unpacked")
        zipped.extractall(root)
