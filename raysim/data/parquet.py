"""The ``parquet`` source: your own data set, a parquet file or a folder of them (``data.data_dir``), in
:data:`PARQUET_LAYOUT`, its images decoded once into a memory-mapped cache a batch at a time, so that a data set larger
than memory streams through. Every mistake in the files is one line that names the column and the row.
"""

from __future__ import annotations

import io
import itertools
import math
import os
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from raysim.base.errors import ConfigError, first_line
from raysim.data import decode_cache, row_digests
from raysim.data.image_values import decoded, fit_array, tensor_rows, tensor_shape
from raysim.data.npy_file import write_npy
from raysim.data.shards import DatasetInfo
from raysim.data.sources import cache_dir, fixed_test_split

PARQUET_LAYOUT = (
    "a parquet file or folder with columns 'image' (PNG/JPEG bytes or a uint8 array or fixed-shape tensor, all one "
    "size), 'label' (int), optional 'domain' (int) and 'split' ('train'/'test', a column or split=train/split=test "
    "subfolders)"
)
DECODER = 2  # raised whenever the images decoded from the same files change: older copies are then never read
READ_BUFFER_BYTES = 4 * 2**20  # what the parquet reader holds of a column chunk at a time
BATCH_BYTES = 32 * 2**20  # a batch of tensor rows, at most (and at most 4096 rows)
ENCODED_BATCH_ROWS = 256  # rows of file bytes or nested lists decoded between two writes
SPLIT_FOLDERS = ("train", "test", "val", "valid", "validation")  # what plain subfolders named for a split look like


def png_table(images: np.ndarray, labels: np.ndarray, split: np.ndarray) -> pa.Table:
    """Rows in :data:`PARQUET_LAYOUT`: uint8 ``images`` [n, H, W, 3] as PNG bytes, their ``labels`` and ``split``
    ('train'/'test'), e.g. a generated set to write with ``pyarrow.parquet``."""
    from PIL import Image

    encoded = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    return pa.table({"image": encoded, "label": np.asarray(labels, np.int64), "split": split})


def read_parquet(cfg):
    """Any parquet file or folder in the documented layout (``data.data_dir``; hive subfolders such as
    ``split=test/`` are columns), decoded once into a memory-mapped cache (``parquet-<key>.npy`` in the data cache,
    keyed by the files, ``data.image_size`` and the decoder) a batch at a time: a file larger than memory streams
    through, and the next run maps the cache. Copies of files that changed or are gone, and copies of an older
    decoder, are removed (:mod:`raysim.data.decode_cache`)."""
    where = f"parquet at {cfg.data_dir}"
    if not cfg.data_dir:
        raise ConfigError(f"dataset 'parquet' needs data.data_dir: {PARQUET_LAYOUT}")
    if not Path(cfg.data_dir).exists():
        raise ConfigError(f"data.data_dir {cfg.data_dir} does not exist; pass --data-dir with {PARQUET_LAYOUT}")
    import pyarrow.dataset  # here, not at the top: it imports pandas, 0.2 s in every process that imports raysim.data

    try:
        dataset = pyarrow.dataset.dataset(cfg.data_dir, format="parquet", partitioning="hive")
        columns = set(dataset.schema.names)
    except Exception as error:
        raise ConfigError(
            f"could not read {where} ({type(error).__name__}: {first_line(error)}); expected {PARQUET_LAYOUT}"
        ) from None
    if not dataset.files:
        raise ConfigError(f"could not read {where} (no parquet files there); expected {PARQUET_LAYOUT}")
    if not {"image", "label"} <= columns:
        raise ConfigError(f"{where} has columns {sorted(columns)}; expected {PARQUET_LAYOUT}")
    _check_files_alike(dataset, where)
    if "split" not in columns:
        _refuse_plain_split_folders(dataset.files, cfg.data_dir, where)
    small = _read(lambda: dataset.to_table(columns=[c for c in ("label", "domain", "split") if c in columns]), where)
    labels = _whole_numbers(small, "label", where)
    if not len(labels):
        raise ConfigError(f"dataset {where} has no rows")
    domains = _whole_numbers(small, "domain", where) if "domain" in columns else np.zeros(len(labels), np.int64)
    is_test = _test_rows(small, where) if "split" in columns else fixed_test_split(labels, domains)
    _check_labels(labels, is_test, where)
    _check_domains(domains, is_test, where)
    images, digests = _decoded_images(dataset, len(labels), cfg, where)
    info = DatasetInfo("parquet", int(labels.max()) + 1, int(domains.max()) + 1, tuple(images.shape[1:]))
    arrays = {"image": images, "label": labels, "domain": domains, "is_test": is_test, "image_digest": digests}
    return arrays, info


def _whole_numbers(table: pa.Table, column: str, where: str) -> np.ndarray:
    """``table[column]`` as int64, refused in one line (naming the first offending row and value) unless every value
    is a whole number from 0 to 2^62: a class or domain index, which a float such as 1.5 is not."""
    values = table[column]
    kind = values.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
        raise ConfigError(f"{where}: column {column!r} holds {kind}, not whole numbers >= 0 (class indices)")
    as_float = values.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    too_large = as_float >= 2.0**62  # no class or domain index, and past int64 once cast
    bad = np.flatnonzero(~np.isfinite(as_float) | (as_float < 0) | (np.floor(as_float) != as_float) | too_large)
    if len(bad):
        raise ConfigError(
            f"{where}: column {column!r} must hold whole numbers >= 0, but row {bad[0]} holds "
            f"{values[int(bad[0])].as_py()!r}; write it as integer indices"
        )
    return as_float.astype(np.int64)


def _test_rows(table: pa.Table, where: str) -> np.ndarray:
    """Whether each row is a test row, from the ``split`` column: every value 'train' or 'test', both present."""
    values = table["split"].to_pylist()
    bad = next((row for row, value in enumerate(values) if value not in ("train", "test")), None)
    if bad is not None:
        raise ConfigError(
            f"{where}: column 'split' must hold 'train' or 'test', but row {bad} holds {values[bad]!r}; write one "
            "of the two in every row, or drop the column for a fixed 20% test split"
        )
    is_test = np.array([value == "test" for value in values])
    if is_test.all() or not is_test.any():
        missing = "train" if is_test.all() else "test"
        raise ConfigError(
            f"{where}: no row's split is {missing!r}; clients need rows to train on and rows to be tested on "
            "(mark about a fifth of the rows 'test', or drop the column for a fixed 20% test split)"
        )
    return is_test


def _check_files_alike(dataset, where: str) -> None:
    """Every file of a folder has the columns of the first, of the same kinds (whole numbers, floats, text, bytes,
    lists; the data set's schema is the first file's, and a later file that differs would fail mid-read)."""
    import pyarrow.parquet

    first = None
    for path in dataset.files:
        with dataset.filesystem.open_input_file(path) as source:
            schema = _read(lambda: pyarrow.parquet.read_schema(source), where, path)
        kinds = {
            field.name: _kind(field.type) for field in schema if field.name in ("image", "label", "domain", "split")
        }
        shape = tensor_shape(schema.field("image"), where) if "image" in kinds else None
        if shape is not None:  # a tensor column's rows are read in the first file's shape
            kinds["image"] = f"tensors of shape {shape}"
        if first is None:
            first = path, kinds
            continue
        for name in sorted({*kinds, *first[1]}):
            here, there = kinds.get(name), first[1].get(name)
            if here != there:
                said = f"has column {name!r} as {here}" if here else f"has no column {name!r}"
                raise ConfigError(
                    f"{where}: {path} {said}, where {first[0]} has {f'it as {there}' if there else 'none'}; write "
                    "every file with the same columns and types"
                )


def _read(read, where: str, path: str | None = None):
    """``read()``, a file or a damaged page that pyarrow cannot read refused in one line with its reason."""
    try:
        return read()
    except (pa.ArrowException, OSError) as error:
        what = f"{path} could not be read as parquet" if path else "a file could not be read as parquet"
        reason = first_line(error) or type(error).__name__
        raise ConfigError(
            f"{where}: {what} ({reason}); move anything that is not a data file out of the folder, or write the file "
            "again"
        ) from None


def _refuse_plain_split_folders(files: list[str], root: str, where: str) -> None:
    """A folder of ``train/`` and ``test/`` subfolders without a ``split`` column would be split again (its test rows
    trained on): refused, naming the hive spelling that makes them the split."""
    if not os.path.isdir(root):  # one file: no subfolders
        return
    named = sorted({Path(os.path.relpath(path, root)).parts[0] for path in files} & set(SPLIT_FOLDERS))
    if named:
        raise ConfigError(
            f"{where} has subfolders {', '.join(f'{n}/' for n in named)} but no 'split' column, so its rows would be "
            "split again, 20% held out of each cell; rename them split=train/ and split=test/ (hive folders), or "
            "write a 'split' column"
        )


def _kind(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):  # dictionary-encoded (pandas' category): read as its values
        kind = kind.value_type
    for name, test in (
        ("whole numbers", pa.types.is_integer),
        ("floats", pa.types.is_floating),
        ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("bytes", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("lists", lambda t: pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)),
    ):
        if test(kind):
            return name
    return str(kind)


def _check_labels(labels: np.ndarray, is_test: np.ndarray, where: str) -> None:
    """Every class from 0 to the largest label has training rows: a class without them would still be dealt to
    clients (``--partition pathological`` gives each client s classes) and scored on."""
    empty = _first_without_training_rows(labels, is_test)
    if empty is not None:
        raise ConfigError(
            f"{where}: column 'label' has no training row of class {empty} (classes are numbered 0 to "
            f"{labels.max()}); number the classes that have rows 0, 1, 2, ... without gaps"
        )


def _check_domains(domains: np.ndarray, is_test: np.ndarray, where: str) -> None:
    """Every domain from 0 to the largest id has training rows (``--partition domains`` gives each its clients)."""
    empty = _first_without_training_rows(domains, is_test)
    if empty is not None:
        raise ConfigError(
            f"{where}: column 'domain' has no training row of domain {empty} (domains are numbered 0 to "
            f"{domains.max()}); number the domains that have rows 0, 1, 2, ... without gaps"
        )


def _first_without_training_rows(values: np.ndarray, is_test: np.ndarray) -> int | None:
    """The smallest index from 0 to ``values.max()`` that no training row holds; None where every one has rows.
    Counted over the values present, so an id in the billions costs no more memory than the rows."""
    present = np.unique(values[~is_test])
    if len(present) == int(values.max()) + 1:  # 0 .. max, each present (the values are whole numbers >= 0)
        return None
    gaps = np.flatnonzero(present != np.arange(len(present)))
    return int(gaps[0]) if len(gaps) else len(present)


def _decoded_images(dataset, rows: int, cfg, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Every row's image, decoded (and resized to ``data.image_size``), as a read-only map of the cache file, and
    each row's digest (:mod:`raysim.data.row_digests`, kept beside the cache)."""
    import PIL

    files, decoder = decode_cache.stamp(dataset.files), [DECODER, PIL.__version__]
    path = decode_cache.copy_path(cache_dir(), files, cfg.image_size, *decoder)
    path.parent.mkdir(parents=True, exist_ok=True)
    source = os.path.abspath(cfg.data_dir)
    decode_cache.hold(path)  # before the clean-up: another run's never removes the copy this run reads
    decode_cache.prune(path.parent, decoder, source, files)
    if path.exists():
        images = np.load(path, mmap_mode="r")
        return images, row_digests.kept_row_digests(path, images)
    partial = decode_cache.partial_path(path)
    batches = (images for images in _decoded_batches(dataset, cfg.image_size, where) if len(images))
    first = next(batches)  # the labels' rows are the images' rows: there is one
    shape = first[0].shape
    digests = []

    def checked():
        row = 0
        for images in itertools.chain([first], batches):
            for image in images:
                if image.shape != shape:
                    raise ConfigError(
                        f"{where}: row {row}'s image is {'x'.join(map(str, image.shape))}, row 0's "
                        f"{'x'.join(map(str, shape))}; pass --set data.image_size=N to make every image RGB N x N"
                    )
                row += 1
            stacked = np.stack(images)
            digests.append(row_digests.row_digests(stacked))
            yield stacked

    try:
        write_npy(partial, np.uint8, (rows, *shape), checked())
        kept = row_digests.save_row_digests(path, digests)
        decode_cache.note(path, files, decoder, source)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r"), kept


def _decoded_batches(dataset, size: int | None, where: str):
    """The ``image`` column a batch at a time as uint8 images (:mod:`raysim.data.image_values`), RGB ``size`` x
    ``size`` when a size is given."""
    shape = tensor_shape(dataset.schema.field("image"), where)
    rows = min(4096, max(1, BATCH_BYTES // math.prod(shape))) if shape is not None else ENCODED_BATCH_ROWS
    first = 0  # the batch's first row
    for batch in _image_batches(dataset, rows, where):
        column = batch.column(0)
        if shape is not None:
            images = tensor_rows(column, shape, first, where)
        else:  # one image at a time, resized at once: a batch of large photos is never held at full size
            images = (decoded(value, first + i, where) for i, value in enumerate(column.to_pylist()))
        yield [fit_array(image, size) for image in images] if size else list(images)
        first += len(column)


def _image_batches(dataset, rows: int, where: str):
    """The ``image`` column in batches of ``rows``, in the dataset's row order, its pages read through a buffer of
    ``READ_BUFFER_BYTES``, so that the memory does not grow with the file or its row groups (reading a whole row group,
    or a column chunk with Arrow's default unbuffered reads, holds all of it meanwhile: docs/performance.md)."""
    import pyarrow.parquet

    for path in dataset.files:
        with dataset.filesystem.open_input_file(path) as source:
            parquet = pyarrow.parquet.ParquetFile(source, buffer_size=READ_BUFFER_BYTES, pre_buffer=False)
            batches = parquet.iter_batches(batch_size=rows, columns=["image"])
            while (batch := _read(partial(next, batches, None), where, path)) is not None:
                yield batch
