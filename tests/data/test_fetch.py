"""``raysim data fetch`` and the first run without --data-dir, against a real HTTP server on 127.0.0.1 that serves
small archives in the real ones' layouts (CIFAR binary records, a Tiny-ImageNet release folder), honours Range
requests and can cut a response half way; ``$RAYSIM_DATA_MIRROR`` points the archives' URLs at it, and the table
of archives holds the small archives' sizes and SHA-256. Nothing here reaches the internet."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import re
import tarfile
import threading
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from raysim.base.errors import ConfigError
from raysim.cli import main
from raysim.config import DataConfig
from raysim.data import fetch as fetch_module
from raysim.data.fetch import ARCHIVES, MIRROR_ENV, fetch
from raysim.data.real import REAL_SOURCES
from raysim.data.sources import load_dataset
from raysim.testing.console import own_lines


class ArchiveHandler(http.server.BaseHTTPRequestHandler):
    """GET /<file> from ``server.files``: 206 from the start a ``Range: bytes=N-`` header names (unless
    ``server.honour_range`` is off), the first ``server.cuts`` responses cut after half their body."""

    def do_GET(self):
        server = self.server
        body = server.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        start = int(asked[1]) if asked and server.honour_range else 0
        if start >= len(body) > 0:
            self.send_error(416)
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        rest = body[start:]
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        sent = rest[: len(rest) // 2] if server.cuts > 0 else rest
        server.cuts -= 1
        server.requests.append((self.headers.get("Range"), len(sent)))  # before the body: the client may finish first
        self.wfile.write(sent)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ArchiveHandler)
    httpd.files, httpd.requests, httpd.cuts, httpd.honour_range = {}, [], 0, True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


# --- archives in the real layouts -----------------------------------------------------------------------------


def cifar_records(labels: list[tuple[int, ...]], seed: int) -> bytes:
    """Records of the official binary format: label bytes, then the red, green and blue 32x32 planes."""
    images = np.random.default_rng(seed).integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8)
    return b"".join(bytes(label) + image.tobytes() for label, image in zip(labels, images))


def tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def jpeg(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buffer, "JPEG")
    return buffer.getvalue()


def cifar10_archive() -> bytes:
    folder = "cifar-10-batches-bin/"
    files = {f"{folder}data_batch_{i}.bin": cifar_records([(i,), (i + 1,)], seed=i) for i in range(1, 6)}
    files[f"{folder}test_batch.bin"] = cifar_records([(0,), (9,), (4,)], seed=6)
    files[f"{folder}batches.meta.txt"] = "\n".join(f"name{c}" for c in range(10)).encode()
    return tar_gz(files)


def cifar100_archive() -> bytes:
    """Every fine class once in train.bin (CIFAR-100's reader needs each one's coarse label), three in test.bin."""
    records = [((7 * fine) % 20, fine) for fine in [*range(100), 3, 50, 99]]
    folder = "cifar-100-binary/"
    return tar_gz(
        {
            f"{folder}train.bin": cifar_records(records[:100], seed=1),
            f"{folder}test.bin": cifar_records(records[100:], seed=2),
            f"{folder}fine_label_names.txt": "\n".join(f"fine{f}" for f in range(100)).encode(),
            f"{folder}coarse_label_names.txt": "\n".join(f"coarse{c}" for c in range(20)).encode(),
        }
    )


def tiny_imagenet_archive() -> bytes:
    folder, wnids = "tiny-imagenet-200/", ("n01443537", "n01629819")
    files = {f"{folder}wnids.txt": "\n".join(wnids).encode(), f"{folder}words.txt": b"n01443537\tgoldfish, fish\n"}
    for c, wnid in enumerate(wnids):
        files[f"{folder}train/{wnid}/images/{wnid}_0.JPEG"] = jpeg(c)
        files[f"{folder}train/{wnid}/{wnid}_boxes.txt"] = b""
    files[f"{folder}val/images/val_0.JPEG"] = jpeg(9)
    files[f"{folder}val/val_annotations.txt"] = f"val_0.JPEG\t{wnids[1]}\t0\t0\t63\t63\n".encode()
    return zipped(files)


BUILDERS = {"cifar10": cifar10_archive, "cifar100": cifar100_archive, "tiny-imagenet": tiny_imagenet_archive}


def pinned(name: str, body: bytes) -> fetch_module.Archive:
    """The real table's entry (its URL, folder and marker) with the size and SHA-256 of ``body``."""
    return dataclasses.replace(ARCHIVES[name], size=len(body), sha256=hashlib.sha256(body).hexdigest())


@pytest.fixture
def served(server, monkeypatch, tmp_path):
    """The small archives on the local server, the mirror pointing there, the table holding their digests and the
    data cache in tmp_path; returns the server."""
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(MIRROR_ENV, f"http://127.0.0.1:{server.server_port}/")
    for name, build in BUILDERS.items():
        body = build()
        server.files[ARCHIVES[name].file] = body
        monkeypatch.setitem(ARCHIVES, name, pinned(name, body))
    return server


def leftovers(tmp_path) -> list[str]:
    """What the downloads folder holds besides the lock files."""
    folder = tmp_path / "cache" / "downloads"
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


# --- tests ----------------------------------------------------------------------------------------------------


def test_the_table_names_real_datasets_and_pins_sha256():
    assert set(ARCHIVES) == {"cifar10", "cifar100", "tiny-imagenet"} and set(ARCHIVES) <= set(REAL_SOURCES)
    for archive in ARCHIVES.values():
        assert re.fullmatch(r"[0-9a-f]{64}", archive.sha256) and archive.size > 100e6
        assert archive.file.endswith((".tar.gz", ".zip")) and not archive.url.startswith("http://127.")


def test_cli_fetches_checks_and_unpacks_each_archive(served, tmp_path):
    for name in BUILDERS:
        result = CliRunner().invoke(main, ["data", "fetch", name])
        assert result.exit_code == 0, result.output
        target = tmp_path / "cache" / "downloads" / ARCHIVES[name].folder
        assert result.stdout.strip() == str(target) and (target / ARCHIVES[name].marker).is_file()
        assert f"{name} unpacked into {target}" in result.stderr
    assert (tmp_path / "cache/downloads/tiny-imagenet-200/train/n01443537/images/n01443537_0.JPEG").is_file()
    assert leftovers(tmp_path) == ["cifar-10-batches-bin", "cifar-100-binary", "tiny-imagenet-200"]  # archives gone
    requests = len(served.requests)
    assert CliRunner().invoke(main, ["data", "fetch", "cifar100"]).exit_code == 0
    assert len(served.requests) == requests  # already fetched: no download


def test_a_run_without_data_dir_fetches_then_reads_through_the_real_readers(served, ray_session):
    info, arrays = load_dataset(DataConfig(dataset="cifar100"))
    assert info.num_classes == 100 and info.coarse_of_class[7] == 9 and info.class_names[1] == "fine1"
    assert arrays["image"].shape == (103, 32, 32, 3) and arrays["is_test"].sum() == 3
    info, arrays = load_dataset(DataConfig(dataset="cifar10"))
    assert arrays["label"].tolist() == [1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 0, 9, 4] and info.class_names[9] == "name9"
    info, arrays = load_dataset(DataConfig(dataset="tiny-imagenet"))
    assert info.class_names == ("goldfish", "n01629819") and arrays["image"].shape == (3, 64, 64, 3)
    assert arrays["label"].tolist() == [0, 1, 1] and arrays["is_test"].tolist() == [False, False, True]
    assert len(served.requests) == 3
    load_dataset(DataConfig(dataset="cifar10"))
    assert len(served.requests) == 3  # the second run reads the cache


def test_fetch_takes_a_table_of_archives(server, monkeypatch, tmp_path):
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RAYSIM_DATA_MIRROR", raising=False)  # the suite's (tests/conftest.py) would replace the URL
    body = cifar10_archive()
    server.files["c10.tgz"] = body
    own = {"c10": dataclasses.replace(pinned("cifar10", body), url=f"http://127.0.0.1:{server.server_port}/c10.tgz")}
    assert fetch("c10", own) == tmp_path / "cache" / "downloads" / "cifar-10-batches-bin"
    with pytest.raises(ConfigError, match="fetchable: c10 "):
        fetch("cifar10", own)


def test_an_interrupted_download_resumes_with_a_range_request(served, tmp_path):
    served.cuts = 1
    size = ARCHIVES["cifar100"].size
    fetch("cifar100")
    assert served.requests == [(None, size // 2), (f"bytes={size // 2}-", size - size // 2)]
    assert leftovers(tmp_path) == ["cifar-100-binary"]


def test_a_server_that_ignores_range_is_downloaded_afresh(served, tmp_path):
    served.cuts, served.honour_range = 1, False
    size = ARCHIVES["cifar10"].size
    fetch("cifar10")
    assert served.requests == [(None, size // 2), (f"bytes={size // 2}-", size)]
    assert (tmp_path / "cache/downloads/cifar-10-batches-bin/test_batch.bin").stat().st_size == 3 * 3073


def test_a_download_cut_every_time_keeps_its_bytes_and_the_next_call_resumes(served, tmp_path):
    served.cuts = fetch_module.ATTEMPTS
    with pytest.raises(ConfigError) as failed:
        fetch("cifar10")
    assert "running again resumes" in str(failed.value) and "\n" not in str(failed.value)
    kept = (tmp_path / "cache/downloads/cifar-10-binary.tar.gz.part").stat().st_size
    fetch("cifar10")
    assert served.requests[-1] == (f"bytes={kept}-", ARCHIVES["cifar10"].size - kept)
    assert leftovers(tmp_path) == ["cifar-10-batches-bin"]


def test_a_wrong_checksum_is_one_line_exit_2_and_leaves_nothing(served, tmp_path, monkeypatch):
    expected = "0" * 64
    monkeypatch.setitem(ARCHIVES, "tiny-imagenet", dataclasses.replace(ARCHIVES["tiny-imagenet"], sha256=expected))
    result = CliRunner().invoke(main, ["data", "fetch", "tiny-imagenet"])
    assert result.exit_code == 2
    lines = own_lines(result.stderr)
    actual = hashlib.sha256(served.files["tiny-imagenet-200.zip"]).hexdigest()
    assert lines[-1].startswith("raysim: error: ") and f"SHA-256 {actual}, not the expected {expected}" in lines[-1]
    assert "removed: run again" in lines[-1] and not any(line.startswith("raysim: error") for line in lines[:-1])
    assert leftovers(tmp_path) == []


def test_unknown_names_list_the_fetchable_ones():
    result = CliRunner().invoke(main, ["data", "fetch", "pacs"])
    assert result.exit_code == 2
    assert own_lines(result.stderr) == [
        "raysim: error: dataset 'pacs' has no public archive raysim can fetch; fetchable: cifar10, cifar100, "
        "tiny-imagenet (where to get the others: docs/datasets.md)"
    ]


def test_offline_the_error_is_one_line_saying_what_to_download_and_where(monkeypatch, tmp_path):
    closed = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ArchiveHandler)
    closed.server_close()  # a port nothing listens on
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(MIRROR_ENV, f"http://127.0.0.1:{closed.server_port}")
    archive = ARCHIVES["cifar100"]
    with pytest.raises(ConfigError) as failed:
        load_dataset(DataConfig(dataset="cifar100"))
    message = str(failed.value)
    assert "\n" not in message and message.startswith(
        "dataset 'cifar100' needs --data-dir pointing at cifar-100-binary/"
    )
    for fragment in (
        f"could not download http://127.0.0.1:{closed.server_port}/cifar-100-binary.tar.gz (ConnectionRefusedError",
        f"(168,513,733 bytes, SHA-256 {archive.sha256}) to {tmp_path / 'cache/downloads/cifar-100-binary.tar.gz'}",
        "https://www.cs.toronto.edu/~kriz/cifar.html",
        "docs/datasets.md",
    ):
        assert fragment in message
    result = CliRunner().invoke(main, ["data", "fetch", "cifar100"])
    assert result.exit_code == 2 and len(own_lines(result.stderr)) == 1  # nothing said before the error


def test_an_archive_put_in_downloads_by_hand_is_checked_and_unpacked(owners, served, tmp_path):
    """Unpacked without a download; an unpacking folder its killed process left goes, one under way stays."""
    downloads = tmp_path / "cache" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "cifar-100-binary.tar.gz").write_bytes(served.files["cifar-100-binary.tar.gz"])
    killed = downloads / f".cifar-100-binary.{owners.gone}"
    running = downloads / f".cifar-100-binary.{owners.running}"
    for folder in (killed, running):
        (folder / "cifar-100-binary").mkdir(parents=True)
        (folder / "cifar-100-binary" / "part.bin").write_bytes(b"unpacked so far")
    fetch("cifar100")
    assert served.requests == [] and leftovers(tmp_path) == sorted([running.name, "cifar-100-binary"])


def test_a_zip_member_outside_its_folder_is_refused(server, monkeypatch, tmp_path):
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RAYSIM_DATA_MIRROR", raising=False)
    body = zipped({"tiny-imagenet-200/wnids.txt": b"n0\n", "../../escaped.txt": b"x"})
    server.files["evil.zip"] = body
    url = f"http://127.0.0.1:{server.server_port}/evil.zip"
    evil = {
        "evil": fetch_module.Archive(url, len(body), hashlib.sha256(body).hexdigest(), "tiny-imagenet-200", "wnids.txt")
    }
    with pytest.raises(ConfigError, match="'../../escaped.txt', which would unpack outside its folder"):
        fetch("evil", evil)
    assert not list(tmp_path.rglob("escaped.txt")) and leftovers(tmp_path) == ["evil.zip"]


def test_a_mirror_that_is_not_a_url_or_a_cache_that_is_a_file_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(MIRROR_ENV, "mirror.example/datasets")
    result = CliRunner().invoke(main, ["data", "fetch", "cifar10"])
    assert result.exit_code == 2, result.stderr
    assert result.stderr == (
        f"raysim: error: {MIRROR_ENV}=mirror.example/datasets is not a URL; set it to one, e.g. "
        "https://mirror.example/datasets\n"
    )

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "file"))
    monkeypatch.delenv(MIRROR_ENV)
    result = CliRunner().invoke(main, ["data", "fetch", "cifar10"])
    assert result.exit_code == 2, result.stderr
    said = f"the data cache {tmp_path / 'file'} is a file, not a folder; set RAYSIM_CACHE to a folder"
    assert result.stderr == f"raysim: error: {said}\n"
