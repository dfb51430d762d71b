"""Sources: the bundled digits and the synthetic set (built in-process, no Ray needed), and parquet files in the
documented layout (read with pyarrow, decoded into a cache)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raysim.base.errors import ConfigError
from raysim.config import DataConfig
from raysim.data import row_digests
from raysim.data.image_values import fit_image
from raysim.data.partition import PartitionParams, partition
from raysim.data.shards import build_shards
from raysim.data.sources import fixed_test_split, load_dataset


def test_digits_are_the_real_sklearn_digits():
    from sklearn.datasets import load_digits

    info, arrays = load_dataset(DataConfig(dataset="digits"))
    digits = load_digits()
    assert info.num_classes == 10 and arrays["image"].shape == (1797, 8, 8)
    assert arrays["image"].dtype == np.uint8 and arrays["image"].max() == 255
    assert (arrays["label"] == digits.target).all()
    assert abs(arrays["is_test"].mean() - 0.2) < 0.01


def test_synthetic_is_deterministic_and_balanced():
    info, first = load_dataset(DataConfig(dataset="synthetic"))
    _, second = load_dataset(DataConfig(dataset="synthetic"))
    assert (first["image"] == second["image"]).all()
    assert info.num_domains == 3 and info.coarse_of_class == (0, 0, 1, 1, 2, 2, 3, 3, 4, 4)
    cells = np.bincount(first["domain"] * 10 + first["label"])
    assert (cells == 50).all()
    assert first["is_test"].sum() == 30 * 10


def test_fixed_test_split_takes_a_fifth_of_every_cell():
    labels = np.repeat(np.arange(4), 10)
    domains = np.tile([0, 1], 20)
    is_test = fixed_test_split(labels, domains)
    for d in (0, 1):
        for c in range(4):
            assert is_test[(labels == c) & (domains == d)].sum() == 1  # round(0.2 * 5)
    assert (is_test == fixed_test_split(labels, domains)).all()


def test_validation_rows_are_a_fifth_of_the_training_rows_and_leave_the_test_rows_out():
    """``data.holdout=validation`` (what a comparison tunes on): the test images never reach the run; a fixed fifth
    of every training cell is scored instead."""
    _, rows = load_dataset(DataConfig(dataset="synthetic"))
    _, held = load_dataset(DataConfig(dataset="synthetic", holdout="validation"))
    train = ~rows["is_test"]
    assert len(held["label"]) == train.sum() == 30 * 40  # 3 domains x 10 classes x 40 training rows
    assert held["image"] is rows["image"] or (held["image"] == rows["image"]).all()  # the block is not copied
    np.testing.assert_array_equal(held["row"], np.flatnonzero(train))  # the training rows, in their order
    np.testing.assert_array_equal(held["label"], rows["label"][train])
    cells = held["domain"] * 10 + held["label"]
    assert (np.bincount(cells[held["is_test"]], minlength=30) == 8).all()  # 0.2 x 40 of every cell
    assert not (held["is_test"] == rows["is_test"][train]).all()  # its own draw (all False there)
    _, again = load_dataset(DataConfig(dataset="synthetic", holdout="validation"))
    np.testing.assert_array_equal(again["is_test"], held["is_test"])


def test_shards_on_validation_rows_hold_training_images_only_with_their_labels():
    from raysim.engine.setup import prepare_shards
    from raysim.testing.smoke import smoke_config

    _, rows = load_dataset(DataConfig(dataset="synthetic"))
    origin = {rows["image"][i].tobytes(): i for i in range(len(rows["label"]))}  # every synthetic image differs
    assert len(origin) == len(rows["label"])
    shards = prepare_shards(smoke_config("fedavg", {"data": {"holdout": "validation"}}))
    found = np.array([origin[image.tobytes()] for image in shards.images])
    assert not rows["is_test"][found].any()  # no test image reaches the run
    np.testing.assert_array_equal(shards.labels, rows["label"][found])  # each image with its own label
    assert len(found) == len(set(found.tolist())) == (~rows["is_test"]).sum()  # all training rows, once


def _png(array: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def test_parquet_with_png_bytes_domains_and_split(ray_session, tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (12, 6, 6, 3), dtype=np.uint8)
    table = pa.table(
        {
            "image": [_png(i) for i in images],
            "label": [i % 3 for i in range(12)],
            "domain": [i % 2 for i in range(12)],
            "split": ["test" if i < 4 else "train" for i in range(12)],
        }
    )
    pq.write_table(table, tmp_path / "data.parquet")
    info, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path / "data.parquet")))
    assert info.num_classes == 3 and info.num_domains == 2 and info.image_shape == (6, 6, 3)
    assert (arrays["image"] == images).all()
    assert arrays["is_test"].tolist() == [True] * 4 + [False] * 8


def test_parquet_folder_of_several_files_and_row_groups_keeps_images_with_their_labels(tmp_path):
    """Images are decoded one row group at a time; the labels are read in one pass: both in the dataset's order."""
    folder = tmp_path / "data"
    folder.mkdir()
    for part, labels in enumerate(([0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 0, 1])):
        table = pa.table({"image": [_png(np.full((4, 4, 3), 20 * v, np.uint8)) for v in labels], "label": labels})
        pq.write_table(table, folder / f"part-{part}.parquet", row_group_size=2)
    _, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=str(folder)))
    assert len(arrays["label"]) == 12 and (arrays["image"][:, 0, 0, 0] == 20 * arrays["label"]).all()


def test_parquet_without_split_gets_the_fixed_split(ray_session, tmp_path):
    table = pa.table(
        {"image": [_png(np.full((4, 4), i, np.uint8)) for i in range(20)], "label": [i % 2 for i in range(20)]}
    )
    pq.write_table(table, tmp_path / "d.parquet")
    _, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path)))
    assert arrays["is_test"].sum() == 4 and arrays["image"].shape == (20, 4, 4)


def _good(folder: Path, name: str) -> None:
    """A small valid parquet file at ``folder / name`` (its folders made)."""
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    images = [_png(np.full((4, 4), i, np.uint8)) for i in range(10)]
    pq.write_table(pa.table({"image": images, "label": [i % 2 for i in range(10)]}), folder / name)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: None, "missing does not exist; pass --data-dir with a parquet file or folder"),
        (
            lambda p: (_good(p, "a.parquet"), (p / "zz_notes.txt").write_text("notes")),
            "zz_notes.txt could not be read as parquet (",
        ),
        (lambda p: (_good(p, "b.parquet"), (p / "README.md").write_text("# data")), "README.md"),
        (
            lambda p: (_good(p, "train/a.parquet"), _good(p, "test/a.parquet")),
            "has subfolders test/, train/ but no 'split' column",
        ),
        (lambda p: pq.write_table(pa.table({"pixels": [b"x"], "y": [1]}), p / "x.parquet"), "expected a parquet"),
        (lambda p: (p / "x.parquet").write_text("not parquet"), "could not read parquet"),
        (
            lambda p: pq.write_table(
                pa.table({"image": pa.array([], pa.binary()), "label": pa.array([], pa.int64())}), p / "x.parquet"
            ),
            "has no rows",
        ),
    ],
)
def test_bad_parquet_dirs_give_one_line_errors(ray_session, tmp_path, make, fragment):
    make(tmp_path)
    data_dir = str(tmp_path) if any(tmp_path.iterdir()) else str(tmp_path / "missing")
    with pytest.raises(ConfigError) as info:
        load_dataset(DataConfig(dataset="parquet", data_dir=data_dir))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_parquet_of_hugging_faces_image_structs_reads_their_bytes_and_names_a_row_with_a_path_only(tmp_path):
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": _png(np.full((4, 4), 10 * i, np.uint8)), "path": f"{i}.png"} for i in range(10)]
    pq.write_table(pa.table({"image": pa.array(rows, image), "label": [i % 2 for i in range(10)]}), tmp_path / "a.pq")
    _, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path / "a.pq")))
    assert [int(arrays["image"][i].max()) for i in range(10)] == [10 * i for i in range(10)]
    rows[3] = {"bytes": None, "path": "/data/3.png"}
    pq.write_table(pa.table({"image": pa.array(rows, image), "label": [i % 2 for i in range(10)]}), tmp_path / "b.pq")
    with pytest.raises(ConfigError, match=r"row 3's image holds a path \('/data/3.png'\), not the image's bytes"):
        load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path / "b.pq")))


def test_parquet_of_mixed_sizes_needs_image_size_and_then_resizes(ray_session, tmp_path):
    sizes = [4, 4, 6, 6, 6]
    pq.write_table(
        pa.table({"image": [_png(np.full((n, n, 3), 9 * n, np.uint8)) for n in sizes], "label": [0, 1, 0, 1, 0]}),
        tmp_path / "m.parquet",
    )
    with pytest.raises(ConfigError) as info:
        load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path)))
    assert "row 2's image is 6x6x3, row 0's 4x4x3" in str(info.value) and "data.image_size" in str(info.value)
    _, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path), image_size=8))
    assert arrays["image"].shape == (5, 8, 8, 3)
    assert (arrays["image"][0] == 36).all() and (arrays["image"][4] == 54).all()


def test_sources_that_do_not_parallelise_never_import_ray_data(tmp_path):
    """Ray Data is imported by the sources that run it (raysim.data.sources.ray_data), not by a run on the bundled
    sets or a parquet file: importing it costs the driver memory and seconds."""
    pq.write_table(pa.table({"image": [_png(np.zeros((4, 4, 3), np.uint8))] * 5, "label": [0] * 5}), tmp_path / "p.pq")
    code = (
        "import sys, ray\n"
        "from raysim.config import DataConfig\n"
        "from raysim.data.sources import load_dataset\n"
        "from raysim.engine.driver import run\n"
        f"for config in (DataConfig(dataset='digits'), DataConfig(dataset='synthetic'), "
        f"DataConfig(dataset='parquet', data_dir={str(tmp_path / 'p.pq')!r})):\n"
        "    load_dataset(config)\n"
        "print(sorted(m for m in sys.modules if m.startswith('ray.data')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_decoded_copies_of_changed_or_deleted_parquet_files_are_removed(tmp_path, monkeypatch):
    """A rewritten file gets a new decoded copy and its old copy goes (one rewritten with its size and modification
    time too); a deleted file's copy goes at the next read of any parquet set; an unchanged file's copy stays (and is
    mapped, not decoded again). Each read is a run's process, which holds the copy it maps while it lives."""
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))

    def copies():
        return sorted(p.name for p in (tmp_path / "cache").glob("parquet-*.npy"))

    def write(path, value, rows):
        table = pa.table({"image": [_png(np.full((4, 4, 3), value, np.uint8))] * rows, "label": [0, 1] * (rows // 2)})
        pq.write_table(table, path)

    def read(path):
        return read_in_a_process(path, tmp_path / "read.npy")

    kept, changing = tmp_path / "kept.parquet", tmp_path / "changing.parquet"
    write(kept, 1, 4)
    write(changing, 2, 4)
    read(kept)
    read(changing)
    first = copies()
    assert len(first) == 2 and len(list((tmp_path / "cache").glob("parquet-*.json"))) == 2
    write(changing, 3, 6)  # rewritten: a new size and time
    assert (read(changing) == 3).all()
    second = copies()
    assert len(second) == 2 and len(set(first) & set(second)) == 1  # kept's copy stayed, changing's was replaced
    changing.unlink()
    assert (read(kept) == 1).all()
    assert copies() == sorted(set(first) & set(second))
    assert sorted(p.stem for p in (tmp_path / "cache").glob("parquet-*.json")) == [Path(c).stem for c in copies()]
    assert sorted(p.stem for p in (tmp_path / "cache").glob("parquet-*.digests")) == [Path(c).stem for c in copies()]
    # rewritten with the same size and its modification time set back (as cp -p does): the rows in another order
    swapped = tmp_path / "swapped.parquet"
    pngs = [_png(np.full((4, 4, 3), value, np.uint8)) for value in (5, 6)]
    pq.write_table(pa.table({"image": pngs * 2, "label": [0, 1] * 2}), swapped)
    assert (read(swapped)[0] == 5).all()
    status = swapped.stat()
    pq.write_table(pa.table({"image": pngs[::-1] * 2, "label": [0, 1] * 2}), swapped)
    os.utime(swapped, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert swapped.stat().st_size == status.st_size and (read(swapped)[0] == 6).all()
    # a file added to a folder: the folder's copy of its earlier files goes (no run reads them alone again), the
    # other data sets' copies stay
    folder = tmp_path / "folder"
    folder.mkdir()
    write(folder / "a.parquet", 7, 4)
    read(folder)
    before = set(copies())
    write(folder / "b.parquet", 8, 4)
    assert read(folder).shape[0] == 8
    after = set(copies())
    assert len(after) == len(before) and len(after - before) == 1


def test_a_decoded_copy_keeps_its_rows_digests_and_the_partition_digest_does_not_depend_on_the_layout(
    tmp_path, monkeypatch
):
    """The rows' digests are kept beside the decoded copy (and made again when missing); the partition's digest from
    them equals the one hashed from the images, for the block in memory and the block read in place."""

    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (40, 4, 4, 3), dtype=np.uint8), np.arange(40) % 4
    pq.write_table(pa.table({"image": [_png(i) for i in images], "label": labels}), tmp_path / "d.parquet")
    config = DataConfig(dataset="parquet", data_dir=str(tmp_path / "d.parquet"))
    info, arrays = load_dataset(config)
    assert np.array_equal(arrays["image_digest"], row_digests.row_digests(images))
    (kept,) = (tmp_path / "cache").glob("parquet-*.digests")
    kept.unlink()
    assert np.array_equal(load_dataset(config)[1]["image_digest"], arrays["image_digest"]) and kept.exists()
    is_test = arrays["is_test"]
    domains = arrays["domain"]
    part = partition(
        "iid", train_labels=labels[~is_test], train_domains=domains[~is_test], test_labels=labels[is_test],
        test_domains=domains[is_test], num_classes=4, num_domains=1, num_clients=5, params=PartitionParams(), seed=0,
    )  # fmt: skip
    in_place = build_shards(info, arrays, part, (), folder=tmp_path / "shards")
    in_memory = build_shards(info, {k: v for k, v in arrays.items() if k != "image_digest"}, part, ())
    assert in_place.image_rows is not None and in_place.digest and in_memory.digest is None
    assert in_place.content_digest() == in_memory.content_digest()
    assert replace(in_place, digest=None).content_digest() == in_place.content_digest()  # hashed from the images


READ_TO_NPY = """
import sys
import numpy as np
from raysim.config import DataConfig
from raysim.data.sources import load_dataset
np.save(sys.argv[2], load_dataset(DataConfig(dataset="parquet", data_dir=sys.argv[1]))[1]["image"])
"""


def read_in_a_process(data_dir: Path, out: Path) -> np.ndarray:
    """The images of the parquet at ``data_dir`` as another run's process reads them (the copies it held freed as it
    ends), by way of ``out``."""
    done = subprocess.run([sys.executable, "-c", READ_TO_NPY, str(data_dir), str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return np.load(out)


def test_a_copy_a_running_process_reads_is_kept_when_its_folder_gains_a_file(tmp_path, monkeypatch):
    """Another run's read would remove the copy of the folder's earlier files; this process maps it (a run's driver,
    whose workers open it by path), so it stays, and its workers still find it."""
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "folder"
    _good(folder, "a.parquet")
    held = load_dataset(DataConfig(dataset="parquet", data_dir=str(folder)))[1]["image"]
    (copy,) = (tmp_path / "cache").glob("parquet-*.npy")
    _good(folder, "b.parquet")
    assert read_in_a_process(folder, tmp_path / "other.npy").shape[0] == 20 and copy.is_file()
    assert np.array_equal(np.load(copy, mmap_mode="r"), held)


def test_a_decoded_copy_in_a_cache_that_cannot_be_written_is_read(tmp_path, monkeypatch):
    """A cache shared read-only (here a folder made immutable, which binds root too): its copy is read as it is, with
    no lock file beside it."""
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    _good(tmp_path, "a.parquet")
    first = read_in_a_process(tmp_path / "a.parquet", tmp_path / "first.npy")
    (cache,) = {path.parent for path in (tmp_path / "cache").rglob("parquet-*.npy")}
    for lock in cache.glob("*.lock"):
        lock.unlink()
    if subprocess.run(["chattr", "+i", str(cache)], capture_output=True).returncode:
        pytest.skip("chattr cannot make a folder immutable here")
    try:
        images = load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path / "a.parquet")))[1]["image"]
    finally:
        subprocess.run(["chattr", "-i", str(cache)], check=True)
    assert np.array_equal(np.asarray(images), first)


DECODE_AND_REPORT = """
import sys
open("/proc/self/clear_refs", "w").write("5")  # the peak starts here: a process forked from the test's inherits its
from raysim.config import DataConfig
from raysim.data.sources import load_dataset
info, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=sys.argv[1]))
images = arrays["image"]
peak_kib = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(int(peak_kib) * 1024, images.shape[0], int(images[0].sum()), int(images[-1].sum()))
"""


def test_a_decode_its_killed_process_left_is_removed_and_one_under_way_is_not(owners, tmp_path, monkeypatch):
    """A partial copy is named by its process and host: reading any parquet set removes those whose process on this
    host is gone, never one still being written (here, or by a process of this name on another host)."""

    from raysim.data import decode_cache

    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "cache" / "parquet-0123456789abcdef.npy"
    copy.parent.mkdir()
    left = {
        "killed": copy.with_name(f".{copy.name}.{owners.gone}"),
        "under way": decode_cache.partial_path(copy),
        "other host": copy.with_name(f".{copy.name}.{owners.elsewhere}"),
    }
    for path in left.values():
        path.write_bytes(b"partial")
    pq.write_table(
        pa.table({"image": [_png(np.zeros((4, 4, 3), np.uint8))] * 4, "label": [0, 1] * 2}), tmp_path / "d.pq"
    )
    load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path / "d.pq")))
    assert {what for what, path in left.items() if path.exists()} == {"under way", "other host"}


@pytest.mark.parametrize("rows, side", [(50_000, 32), (1_200, 224)])
def test_a_parquet_of_one_large_row_group_decodes_in_bounded_memory(tmp_path, rows, side):
    """A fixed-shape tensor column written as one row group (154 MB of 32x32 images, 181 MB of 224x224): reading it
    by row group took about 13 bytes of memory per byte of file (2.4 GB of peak RSS for the first), and batches of
    4096 rows whatever their size 2.6 GB for the second; its pages are read through a small buffer and its batches
    hold at most 32 MB, so the whole decode, imports and the copy's written pages included, stays within the file's
    size plus 512 MB."""
    images = np.random.default_rng(0).integers(0, 256, (rows, side, side, 3), dtype=np.uint8)
    table = pa.table(
        {
            "image": pa.FixedShapeTensorArray.from_numpy_ndarray(images),
            "label": pa.array(np.arange(rows) % 10),
            "split": pa.array(np.where(np.arange(rows) % 7 == 0, "test", "train")),  # every class has both
        }
    )
    path = tmp_path / "one-group.parquet"
    pq.write_table(table, path, row_group_size=rows)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    env = {**os.environ, "RAYSIM_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", DECODE_AND_REPORT, str(path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    peak, decoded, first, last = map(int, done.stdout.split())
    assert (decoded, first, last) == (rows, int(images[0].sum()), int(images[-1].sum()))
    assert peak < path.stat().st_size + 512 * 2**20, f"peak RSS {peak / 2**20:.0f} MB"


def test_image_size_resizes_a_generated_source():
    """``data.image_size`` resizes every source: the generated and bundled sets after they are made."""
    from PIL import Image

    _, native = load_dataset(DataConfig(dataset="synthetic"))
    info, resized = load_dataset(DataConfig(dataset="synthetic", image_size=8))
    assert info.image_shape == (8, 8, 3) and resized["image"].shape == (1500, 8, 8, 3)
    assert np.array_equal(resized["image"][7], fit_image(Image.fromarray(native["image"][7]), 8))
    assert np.array_equal(resized["label"], native["label"])


def test_image_size_of_a_grey_sources_own_size_makes_it_rgb():
    """digits are grey 8 x 8: ``data.image_size=8`` gives RGB 8 x 8 ("every image RGB N x N"), its pixels unchanged."""
    _, native = load_dataset(DataConfig(dataset="digits"))
    info, same_size = load_dataset(DataConfig(dataset="digits", image_size=8))
    assert info.image_shape == (8, 8, 3) and same_size["image"].shape == (1797, 8, 8, 3)
    assert all(np.array_equal(same_size["image"][..., c], native["image"]) for c in range(3))
