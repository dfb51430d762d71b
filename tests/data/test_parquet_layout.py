"""The parquet source's images and columns: every kind of image cell it reads (image files in any mode, arrays,
fixed-shape tensors of Arrow's and Ray Data's types, with and without a resize) gives the pixels the file holds, and
every mistake in a file (a cell that is no image, a split that is neither 'train' nor 'test', a domain without rows)
is one line naming the row."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from raysim.base.errors import ConfigError
from raysim.config import DataConfig
from raysim.data.image_values import fit_image
from raysim.data.parquet import DECODER
from raysim.data.sources import load_dataset, rows_table

RED_LEFT = np.zeros((4, 8, 8, 3), np.uint8)
RED_LEFT[:, :, :4, 0] = 255  # the left half of every image red


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path / "cache"))


def encoded(image: Image.Image, format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return buffer.getvalue()


def read(path, **config) -> np.ndarray:
    return np.asarray(load_dataset(DataConfig(dataset="parquet", data_dir=str(path), **config))[1]["image"])


def written(tmp_path, images, labels=(0, 1, 0, 1), **columns):
    pq.write_table(pa.table({"image": images, "label": list(labels), **columns}), tmp_path / "d.parquet")
    return tmp_path / "d.parquet"


@pytest.mark.parametrize("size", [None, 16])
def test_a_fixed_shape_tensor_column_reads_as_its_pixels_with_and_without_a_resize(tmp_path, size):
    column = pa.FixedShapeTensorArray.from_numpy_ndarray(RED_LEFT)
    images = read(written(tmp_path, column), image_size=size)
    expected = RED_LEFT if size is None else np.stack([fit_image(Image.fromarray(i), size) for i in RED_LEFT])
    assert np.array_equal(images, expected)


def test_ray_datas_tensor_column_reads_the_same_whether_or_not_ray_data_is_imported(tmp_path):
    """pyarrow reads Ray Data's tensor type as its list storage unless ``ray.data`` registered the type in the process
    (``raysim run`` never imports it; ``raysim tune`` does): both give the images, at their size and resized."""
    path = tmp_path / "ray.parquet"
    pq.write_table(rows_table(RED_LEFT, np.array([0, 1, 0, 1]), np.zeros(4), np.zeros(4)).drop(["domain"]), path)
    code = (
        "import sys, numpy as np\n"
        "from raysim.config import DataConfig\n"
        "from raysim.data.sources import load_dataset\n"
        f"path = {str(path)!r}\n"
        "for size in (None, 16):\n"
        "    images = load_dataset(DataConfig(dataset='parquet', data_dir=path, image_size=size))[1]['image']\n"
        "    print(images.shape, int((np.asarray(images)[..., 0] > 128).sum()))\n"
        "print('ray.data' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:3] == ["(4, 8, 8, 3) 128", "(4, 16, 16, 3) 512", "False"], done.stdout
    import ray.data  # noqa: F401  (registers the type here)

    assert np.array_equal(read(path), RED_LEFT)
    assert int((read(path, image_size=16)[..., 0] > 128).sum()) == 512


def test_image_files_of_every_mode_become_eight_bit_grey_or_rgb(tmp_path):
    grey = np.arange(64, dtype=np.uint8).reshape(8, 8) * 4
    palette = Image.fromarray(grey).convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
    sixteen = Image.fromarray((grey.astype(np.uint16) << 8) | 0x7F)  # high byte: the grey levels
    rgba = Image.fromarray(np.dstack([np.full((8, 8, 3), 200, np.uint8), np.zeros((8, 8), np.uint8)]), "RGBA")
    cells = [encoded(image) for image in (palette, Image.fromarray(grey > 100), sixteen, rgba)]
    images = read(written(tmp_path, cells), image_size=8)
    assert np.array_equal(images[0], np.asarray(palette.convert("RGB")))  # the palette's colours, not its indices
    assert set(np.unique(images[1])) == {0, 255} and (images[1][grey > 100] == 255).all()  # 1-bit: black and white
    assert np.array_equal(images[2][..., 0], grey)  # 16-bit by its high byte
    assert (images[3] == 200).all()  # RGBA without its alpha
    sixteen_alone = read(written(tmp_path, [encoded(sixteen)] * 2, labels=(0, 1)))
    assert sixteen_alone.shape == (2, 8, 8) and np.array_equal(sixteen_alone[0], grey)


def test_arrays_as_nested_lists_are_read_as_whole_numbers_and_a_trailing_channel_of_one_is_grey(tmp_path):
    image = np.arange(16, dtype=np.int64).reshape(4, 4, 1) * 17
    images = read(written(tmp_path, [image.tolist()] * 4))
    assert images.shape == (4, 4, 4) and np.array_equal(images[0], image[..., 0])


PNG = encoded(Image.new("RGB", (4, 4)))
ZEROS = np.zeros((4, 4, 3), int).tolist()


@pytest.mark.parametrize(
    "cells, fragment",
    [
        ([PNG, PNG, b"not an image", PNG], "row 2's image is not a readable image file"),
        ([PNG, PNG, PNG[:20], PNG], "row 2's image is not a readable image file"),
        ([PNG, PNG, None, PNG], "row 2 has no image (null)"),
        ([ZEROS, ZEROS, np.full((4, 4, 3), 300).tolist(), ZEROS], "row 2's image holds 300, not 0-255"),
        ([ZEROS, ZEROS, np.zeros((4, 4, 4), int).tolist(), ZEROS], "row 2's image has shape (4, 4, 4)"),
        ([[[0, 0], [0, 0]]] * 2 + [[[1, 2], [3]], [[0, 0], [0, 0]]], "row 2's image is a ragged list"),
        ([np.full((4, 4, 3), 0.5).tolist()] * 4, "row 0's image holds float64 values, not 0-255"),
        ([list(range(48))] * 4, "row 0's image has shape (48,), not [H, W] or [H, W, 3]"),
    ],
    ids=["bytes", "truncated png", "null", "over 255", "four channels", "ragged", "floats", "flat"],
)
def test_a_cell_that_is_no_image_is_a_one_line_error_naming_its_row(tmp_path, cells, fragment):
    with pytest.raises(ConfigError) as info:
        read(written(tmp_path, cells))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_tensors_that_are_not_eight_bit_are_refused_naming_the_row(tmp_path):
    floats = pa.FixedShapeTensorArray.from_numpy_ndarray(np.full((4, 4, 4, 3), 0.5, np.float32))
    with pytest.raises(ConfigError, match="row 0's image holds float32 values, not 0-255"):
        read(written(tmp_path, floats))
    wide = np.zeros((4, 4, 4, 3), np.int32)
    wide[3, 1, 1, 0] = 256
    with pytest.raises(ConfigError, match="row 3's image holds 256, not 0-255"):
        read(written(tmp_path, pa.FixedShapeTensorArray.from_numpy_ndarray(wide)))


def test_mixed_grey_and_rgb_images_are_named_and_a_resize_makes_them_all_rgb(tmp_path):
    cells = [encoded(Image.new("RGB", (4, 4), (9, 9, 9))), encoded(Image.new("L", (4, 4), 9))] * 2
    with pytest.raises(ConfigError, match=r"row 1's image is 4x4, row 0's 4x4x3; pass --set data.image_size=N"):
        read(written(tmp_path, cells))
    assert read(written(tmp_path, cells), image_size=4).shape == (4, 4, 4, 3)


def test_split_subfolders_are_the_split_column(tmp_path):
    """A folder written with ``partition_cols=["split"]`` (``split=train/``, ``split=test/``): its test rows stay test
    rows, rather than a fixed 20% drawn over all of them."""
    cells = [encoded(Image.new("L", (4, 4), 10 * i)) for i in range(10)]
    table = pa.table({"image": cells, "label": [i % 2 for i in range(10)], "split": ["test"] * 4 + ["train"] * 6})
    pq.write_to_dataset(table, tmp_path / "data", partition_cols=["split"])
    _, arrays = load_dataset(DataConfig(dataset="parquet", data_dir=str(tmp_path / "data")))
    assert sorted(arrays["image"][arrays["is_test"], 0, 0].tolist()) == [0, 10, 20, 30]


@pytest.mark.parametrize(
    "split, fragment",
    [
        (["train", "Test", "train", "test"], "column 'split' must hold 'train' or 'test', but row 1 holds 'Test'"),
        (["train", "val", "train", "test"], "but row 1 holds 'val'"),
        (["train", None, "train", "test"], "but row 1 holds None"),
        (["train"] * 4, "no row's split is 'test'"),
        (["test"] * 4, "no row's split is 'train'"),
    ],
)
def test_a_split_column_holds_train_and_test_rows_and_nothing_else(tmp_path, split, fragment):
    with pytest.raises(ConfigError) as info:
        read(written(tmp_path, [encoded(Image.new("L", (4, 4)))] * 4, split=split))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_domains_numbered_with_a_gap_are_refused_naming_the_empty_one(tmp_path):
    cells = [encoded(Image.new("L", (4, 4)))] * 6
    with pytest.raises(ConfigError, match="column 'domain' has no training row of domain 0 .*numbered 0 to 2"):
        read(written(tmp_path, cells, labels=[0, 1] * 3, domain=[1, 2] * 3))


def test_classes_numbered_with_a_gap_are_refused_naming_the_empty_one(tmp_path):
    """Labels 1 to 3: class 0 would be a class without rows, which a pathological partition still deals out."""
    cells = [encoded(Image.new("L", (4, 4)))] * 6
    with pytest.raises(ConfigError, match="column 'label' has no training row of class 0 .*numbered 0 to 3"):
        read(written(tmp_path, cells, labels=[1, 2, 3] * 2))


def test_a_folder_whose_files_encode_a_column_differently_reads(tmp_path):
    """Text stored plainly in one file and dictionary-encoded (pandas' category) in another is one kind."""
    cells = [encoded(Image.new("L", (4, 4)))] * 4
    split = pa.array(["train", "train", "test", "test"])
    pq.write_table(pa.table({"image": cells, "label": [0, 1, 0, 1], "split": split}), tmp_path / "a.parquet")
    encoded_split = split.dictionary_encode()
    pq.write_table(pa.table({"image": cells, "label": [0, 1, 0, 1], "split": encoded_split}), tmp_path / "b.parquet")
    assert read(tmp_path).shape[0] == 8


@pytest.mark.parametrize(
    "second, said",
    [
        ({"label": ["a", "b"]}, "b.parquet has column 'label' as text, where {first} has it as whole numbers"),
        ({"picture": "image"}, "b.parquet has no column 'image', where {first} has it as bytes"),
    ],
)
def test_a_folder_whose_files_differ_in_columns_is_refused_naming_the_file(tmp_path, second, said):
    cells = [encoded(Image.new("L", (4, 4)))] * 2
    pq.write_table(pa.table({"image": cells, "label": [0, 1]}), tmp_path / "a.parquet")
    columns = {"image": cells, "label": [0, 1]}
    for name, value in second.items():
        columns[name] = columns.pop(value) if isinstance(value, str) else value
    pq.write_table(pa.table(columns), tmp_path / "b.parquet")
    with pytest.raises(ConfigError) as info:
        read(tmp_path)
    assert said.format(first=tmp_path / "a.parquet") in str(info.value) and "\n" not in str(info.value)


def test_a_folder_whose_files_hold_tensors_of_other_shapes_is_refused_naming_both(tmp_path):
    """Ray Data's tensor column of 8 x 4 images in one file and of 4 x 8 in another (read, without ``ray.data``, as
    lists in the first file's shape): refused, not the second file's pixels rearranged."""
    tall, wide = np.zeros((2, 8, 4, 3), np.uint8), np.zeros((2, 4, 8, 3), np.uint8)
    for name, images in (("a", tall), ("b", wide)):
        table = rows_table(images, np.array([0, 1]), np.zeros(2), np.zeros(2)).drop(["domain"])
        pq.write_table(table, tmp_path / f"{name}.parquet")
    with pytest.raises(ConfigError) as info:
        read(tmp_path)
    assert (
        f"b.parquet has column 'image' as tensors of shape (4, 8, 3), where {tmp_path / 'a.parquet'} has it as "
        "tensors of shape (8, 4, 3)" in str(info.value)
    )


def test_a_label_in_the_billions_is_a_gap_found_without_counting_every_class(tmp_path):
    """A raw id as the label (3,000,000,000): the classes below it without rows are found among the labels present,
    not by a count of 3e9 classes (22 GiB)."""
    cells = [encoded(Image.new("L", (4, 4)))] * 4
    with pytest.raises(ConfigError, match="no training row of class 1 .*numbered 0 to 3000000000"):
        read(written(tmp_path, cells, labels=[0, 3_000_000_000, 0, 3_000_000_000]))


def test_a_uint64_label_past_int64_is_named_not_wrapped_to_a_negative_class(tmp_path):
    cells = [encoded(Image.new("L", (4, 4)))] * 4
    labels = pa.array([0, 2**63 + 5, 1, 0], pa.uint64())
    pq.write_table(pa.table({"image": cells, "label": labels}), tmp_path / "d.parquet")
    with pytest.raises(ConfigError, match=f"column 'label' must hold whole numbers >= 0, but row 1 holds {2**63 + 5}"):
        read(tmp_path / "d.parquet")


def test_a_copy_another_decoder_wrote_is_removed(tmp_path):
    """A decoded copy is keyed by the decoder; one that an older decoder (or Pillow release) wrote is never read
    again, so reading any parquet set removes it."""
    path = written(tmp_path, [encoded(Image.new("L", (4, 4), 7))] * 4)
    read(path)
    (note,) = (tmp_path / "cache").glob("parquet-*.json")
    assert json.loads(note.read_text())["decoder"][0] == DECODER
    older = note.with_name("parquet-0000000000000000.json")
    older.write_text(json.dumps({**json.loads(note.read_text()), "decoder": [DECODER - 1, "10.0.0"]}))
    older.with_suffix(".npy").write_bytes(b"an older decoder's copy")
    assert (read(path) == 7).all()
    assert sorted(p.name for p in (tmp_path / "cache").glob("parquet-*.npy")) == [note.with_suffix(".npy").name]
