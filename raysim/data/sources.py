"""Data sources: one table of rows, ``image`` (uint8), ``label``, ``domain``, ``is_test``.

Every source returns its rows (a ``ray.data.Dataset`` where generating or decoding runs in parallel tasks, or numpy
arrays, e.g. from a parquet file read with pyarrow) and a :class:`DatasetInfo`; :func:`load_dataset` materialises
them once on the driver.
Train/test splits that a source does not define are made per (domain, class) cell with a fixed seed,
so the test set never depends on the run seed.
"""

from __future__ import annotations

import contextlib
import gc
import io
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from raysim.base.errors import ConfigError
from raysim.base.named import Registry
from raysim.base.ray_start import ensure_ray
from raysim.data import decode_cache, row_digests
from raysim.data.npy_file import write_npy
from raysim.data.shards import DatasetInfo

SPLIT_SEED = 20240611
VALIDATION_SEED = SPLIT_SEED + 1  # the validation rows' draw, apart from the test split's


def cache_dir() -> Path:
    """Where generated and decoded data sets are cached: ``$RAYSIM_CACHE``, default ``~/.cache/raysim``."""
    return Path(os.environ.get("RAYSIM_CACHE", "~/.cache/raysim")).expanduser()


TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Source:
    name: str
    description: str
    read: Callable  # (DataConfig) -> (ray.data.Dataset or numpy arrays by column, DatasetInfo)


def rows_table(images: np.ndarray, labels: np.ndarray, domains: np.ndarray, is_test: np.ndarray) -> pa.Table:
    from ray.data.extensions import ArrowTensorArray

    return pa.table(
        {
            "image": ArrowTensorArray.from_numpy(np.ascontiguousarray(images, dtype=np.uint8)),
            "label": pa.array(labels.astype(np.int64)),
            "domain": pa.array(domains.astype(np.int64)),
            "is_test": pa.array(is_test.astype(bool)),
        }
    )


def fixed_test_split(
    labels: np.ndarray, domains: np.ndarray, fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED
) -> np.ndarray:
    """``is_test`` per row: a ``fraction`` of every (domain, class) cell, chosen with a fixed seed."""
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(labels), dtype=bool)
    for cell in np.unique(np.stack([domains, labels], axis=1), axis=0):
        rows = np.flatnonzero((domains == cell[0]) & (labels == cell[1]))
        rows = rows[rng.permutation(len(rows))]
        is_test[rows[: round(fraction * len(rows))]] = True
    return is_test


@cache
def sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled handwritten digits (UCI optdigits test set) as uint8 [1797, 8, 8] (0-255,
    white on black) and int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return np.round(digits.images * (255.0 / 16.0)).astype(np.uint8), digits.target.astype(np.int64)


def _read_digits(_cfg):
    """scikit-learn's bundled handwritten digits: 1,797 8x8 images, 10 classes (in memory already: no Ray Data)."""
    images, labels = sklearn_digits()
    domains = np.zeros_like(labels)
    rows = {"image": images, "label": labels, "domain": domains, "is_test": fixed_test_split(labels, domains)}
    info = DatasetInfo("digits", 10, 1, (8, 8), tuple(str(c) for c in range(10)), ("sklearn",))
    return rows, info


SYNTHETIC_CLASSES, SYNTHETIC_COARSE, SYNTHETIC_DOMAINS, SYNTHETIC_PER_CELL = 10, 5, 3, 50


def _read_synthetic(_cfg):
    """Deterministic toy images: 10 classes (5 coarse pairs) x 3 colour domains, 50 rows per cell.

    Each class is a smooth random 16x16 pattern; the classes of one coarse label share half of it; each
    domain tints and shifts the colours. Each row is a function of its id. 1,500 rows take ~50 ms here, so
    they are rendered in this process: Ray Data's start-up would cost seconds.
    """

    ids = np.arange(SYNTHETIC_DOMAINS * SYNTHETIC_CLASSES * SYNTHETIC_PER_CELL, dtype=np.int64)
    domain, rest = ids // (SYNTHETIC_CLASSES * SYNTHETIC_PER_CELL), ids % (SYNTHETIC_CLASSES * SYNTHETIC_PER_CELL)
    label = rest // SYNTHETIC_PER_CELL
    protos = _synthetic_prototypes()
    tints = np.array([[1.0, 0.3, 0.3], [0.3, 1.0, 0.3], [0.3, 0.3, 1.0]])
    images = np.empty((len(ids), 16, 16, 3), dtype=np.uint8)
    for row, d, c in zip(ids, domain, label):
        noise = np.random.default_rng([SPLIT_SEED, int(row)]).normal(0, 0.15, (16, 16))
        grey = np.clip(protos[c] + noise, 0, 1)
        images[row] = np.round(255 * np.clip(grey[..., None] * tints[d] + 0.1 * d, 0, 1))
    is_test = (rest % SYNTHETIC_PER_CELL) >= int(SYNTHETIC_PER_CELL * (1 - TEST_FRACTION))
    rows = {"image": images, "label": label, "domain": domain, "is_test": is_test}
    coarse = tuple(c // 2 for c in range(SYNTHETIC_CLASSES))
    info = DatasetInfo(
        "synthetic",
        SYNTHETIC_CLASSES,
        SYNTHETIC_DOMAINS,
        (16, 16, 3),
        tuple(f"class{c}" for c in range(SYNTHETIC_CLASSES)),
        ("red", "green", "blue"),
        coarse,
    )
    return rows, info


def _synthetic_prototypes() -> np.ndarray:
    rng = np.random.default_rng(SPLIT_SEED)
    coarse = rng.random((SYNTHETIC_COARSE, 4, 4))
    fine = rng.random((SYNTHETIC_CLASSES, 4, 4))
    low = 0.5 * coarse[np.arange(SYNTHETIC_CLASSES) // 2] + 0.5 * fine
    return np.kron(low, np.ones((4, 4)))


PARQUET_LAYOUT = (
    "a parquet file or folder with columns 'image' (PNG/JPEG bytes or a uint8 array or fixed-shape tensor, all one "
    "size), "
    "'label' (int), optional 'domain' (int) and 'split' ('train'/'test')"
)


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


def _read_parquet(cfg):
    """Any parquet file or folder in the documented layout (``data.data_dir``), decoded once into a memory-mapped
    cache (``parquet-<key>.npy`` in the data cache, keyed by the files, ``data.image_size`` and the Pillow that
    decodes them) a batch at a time: a file larger than memory streams through, and the next run maps the cache.
    Copies of files that changed or are gone are removed (:mod:`raysim.data.decode_cache`)."""
    if not cfg.data_dir or not Path(cfg.data_dir).exists():
        raise ConfigError(f"dataset 'parquet' needs data.data_dir: {PARQUET_LAYOUT}; got {cfg.data_dir!r}")
    import pyarrow.dataset  # here, not at the top: it imports pandas, 0.2 s in every process that imports raysim.data

    try:
        dataset = pyarrow.dataset.dataset(cfg.data_dir, format="parquet")
        columns = set(dataset.schema.names)
    except Exception as error:
        raise ConfigError(
            f"could not read parquet at {cfg.data_dir} ({type(error).__name__}); expected {PARQUET_LAYOUT}"
        ) from None
    if not dataset.files:
        raise ConfigError(
            f"could not read parquet at {cfg.data_dir} (no parquet files there); expected {PARQUET_LAYOUT}"
        )
    if not {"image", "label"} <= columns:
        raise ConfigError(f"parquet at {cfg.data_dir} has columns {sorted(columns)}; expected {PARQUET_LAYOUT}")
    small = dataset.to_table(columns=[c for c in ("label", "domain", "split") if c in columns])
    labels = _whole_numbers(small, "label", cfg.data_dir)
    domains = _whole_numbers(small, "domain", cfg.data_dir) if "domain" in columns else np.zeros(len(labels), np.int64)
    if "split" in columns:
        is_test = np.asarray([str(v) == "test" for v in small["split"].to_pylist()])
    else:
        is_test = fixed_test_split(labels, domains)
    images, digests = _decoded_images(dataset, len(labels), cfg)
    info = DatasetInfo("parquet", int(labels.max()) + 1, int(domains.max()) + 1, tuple(images.shape[1:]))
    arrays = {"image": images, "label": labels, "domain": domains, "is_test": is_test, "image_digest": digests}
    return arrays, info


def _whole_numbers(table: pa.Table, column: str, where: str) -> np.ndarray:
    """``table[column]`` as int64, refused in one line (naming the first offending row and value) unless every value
    is a whole number >= 0: a class or domain index, which a float such as 1.5 is not."""
    values = table[column]
    kind = values.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
        raise ConfigError(f"parquet at {where}: column {column!r} holds {kind}, not whole numbers >= 0 (class indices)")
    as_float = values.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~np.isfinite(as_float) | (as_float < 0) | (np.floor(as_float) != as_float))
    if len(bad):
        raise ConfigError(
            f"parquet at {where}: column {column!r} must hold whole numbers >= 0, but row {bad[0]} holds "
            f"{values[int(bad[0])].as_py()!r}; write it as integer indices"
        )
    return as_float.astype(np.int64)


def _decoded_images(dataset, rows: int, cfg) -> tuple[np.ndarray, np.ndarray]:
    """Every row's image, decoded (and resized to ``data.image_size``), as a read-only map of the cache file, and
    each row's digest (:mod:`raysim.data.row_digests`, kept beside the cache)."""
    import PIL

    files = decode_cache.stamp(dataset.files)
    path = decode_cache.copy_path(cache_dir(), files, cfg.image_size, PIL.__version__)
    path.parent.mkdir(parents=True, exist_ok=True)
    decode_cache.prune(path.parent)
    if path.exists():
        images = np.load(path, mmap_mode="r")
        return images, row_digests.kept_row_digests(path, images)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    decoded = (_decode_column(batch.column(0), cfg.image_size) for batch in _image_batches(dataset))
    batches = (images for images in decoded if len(images))
    first = next(batches, None)
    if first is None:
        raise ConfigError(f"dataset parquet at {cfg.data_dir} has no rows")
    shape = first[0].shape
    digests = []

    def checked():
        for images in itertools.chain([first], batches):
            for image in images:
                if image.shape != shape:
                    raise ConfigError(
                        f"parquet images at {cfg.data_dir} differ in size ({'x'.join(map(str, shape[:2]))}, "
                        f"{'x'.join(map(str, image.shape[:2]))}); pass --set data.image_size=N to resize them to N x N"
                    )
            stacked = np.stack(images)
            digests.append(row_digests.row_digests(stacked))
            yield stacked

    try:
        write_npy(partial, np.uint8, (rows, *shape), checked())
        kept = row_digests.save_row_digests(path, digests)
        decode_cache.note(path, files)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r"), kept


READ_BUFFER_BYTES = 4 * 2**20  # what the parquet reader holds of a column chunk at a time


def _image_batches(dataset, rows: int = 4096):
    """The ``image`` column in batches of ``rows``, in the dataset's row order, its pages read through a buffer of
    ``READ_BUFFER_BYTES``, so that the memory does not grow with the file or its row groups (reading a whole row group,
    or a column chunk with Arrow's default unbuffered reads, holds all of it meanwhile: docs/performance.md)."""
    import pyarrow.parquet

    for path in dataset.files:
        with dataset.filesystem.open_input_file(path) as source:
            parquet = pyarrow.parquet.ParquetFile(source, buffer_size=READ_BUFFER_BYTES, pre_buffer=False)
            yield from parquet.iter_batches(batch_size=rows, columns=["image"])


def _decode_column(column, size: int | None) -> list[np.ndarray] | np.ndarray:
    """A batch of the ``image`` column as uint8 arrays: a fixed-shape tensor column (Arrow's canonical
    ``arrow.fixed_shape_tensor``) in one step, PNG/JPEG bytes or nested lists image by image."""
    if isinstance(column.type, pa.FixedShapeTensorType) and not size:
        return column.to_numpy_ndarray().astype(np.uint8, copy=False)
    return [_decode_image(value, size) for value in column.to_pylist()]


def fit_image(image, size: int) -> np.ndarray:
    """An RGB [size, size, 3] uint8 array of a PIL image, resized bilinearly when its size differs."""
    from PIL import Image

    image = image.convert("RGB")
    if image.size != (size, size):
        image = image.resize((size, size), Image.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def _decode_image(value, size: int | None = None) -> np.ndarray:
    """PNG/JPEG bytes or an array -> uint8 array; RGB and ``size`` x ``size`` when a size is given."""
    from PIL import Image

    image = Image.open(io.BytesIO(value)) if isinstance(value, (bytes, bytearray)) else None
    if size is None:
        return np.asarray(image) if image is not None else np.asarray(value, dtype=np.uint8)
    return fit_image(image if image is not None else Image.fromarray(np.asarray(value, dtype=np.uint8)), size)


SOURCES: Registry[Source] = Registry("dataset", load="raysim.data")  # the package adds the glyph and real sources
for _source in (
    Source("digits", "scikit-learn's real handwritten digits, 8x8, 10 classes, 1,797 images", _read_digits),
    Source(
        "synthetic", "deterministic 16x16 toy images, 10 classes in 5 coarse pairs x 3 colour domains", _read_synthetic
    ),
    Source("parquet", "your own data: " + PARQUET_LAYOUT + " (data.data_dir)", _read_parquet),
):
    SOURCES.add(_source.name, _source)


def _to_numpy(rows) -> dict[str, np.ndarray]:
    """A source's rows as numpy arrays: already arrays, or a Ray Dataset materialised into arrays of this process's
    own (``np.concatenate`` copies; never views into Ray's object store, which the sequential backend stops once its
    set-up ends: ``engine.ray_connect.connect_ray_during``)."""
    if isinstance(rows, dict):
        return rows
    batches = list(rows.iter_batches(batch_size=None, batch_format="numpy"))
    return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


RAY_DATA_ACTORS = (
    ("datasets_stats_actor", "_dataset_stats_actor"),
    ("AutoscalingCoordinator", "AutoscalingCoordinator"),
)


_ray_data_used = threading.Event()  # set by ray_data(): this process started Ray Data's helper actors


def ray_data():
    """``ray.data``, set up as raysim's sources use it: rows in source order, no progress bars, its log at errors only.
    Imported here, by the sources that parallelise with it (glyph generation, decoding the papers' datasets), so a
    run whose source does not use it does not import it. Waits for a Ray that another thread is starting (its first
    call would otherwise start a second one); in a run that starts no Ray unless asked (the sequential backend), has
    the run's own local Ray started, not Ray's default (its dashboard, token authentication): :func:`ensure_ray`."""
    import ray.data

    ensure_ray()
    _ray_data_used.set()

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return ray.data


def _stop_ray_data() -> None:
    """Stops Ray Data's helper actors, so nothing of the data phase holds memory for the rest of the run; nothing
    where Ray is down (the sequential backend stops it after its set-up): looking for them would start it."""
    import ray

    if not ray.is_initialized():
        return
    gc.collect()  # a finished dataset's executor tells Ray Data's actors it is done; let it, then stop them
    for name, namespace in RAY_DATA_ACTORS:
        with contextlib.suppress(ValueError):  # Ray Data did not start it
            ray.kill(ray.get_actor(name, namespace=namespace))


def validation_rows(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The training rows alone, a fixed fifth of each (domain, class) cell of them marked as the rows to evaluate on
    (``data.holdout=validation``): what a tuning ranks its trials on, so the values it picks are never chosen on the
    test images that report the comparison. The image block stays as it is (it may be a map larger than memory);
    ``row`` gives each kept row's place in it."""
    train = np.flatnonzero(~np.asarray(arrays["is_test"], dtype=bool))
    labels, domains = np.asarray(arrays["label"])[train], np.asarray(arrays["domain"])[train]
    is_validation = fixed_test_split(labels, domains, seed=VALIDATION_SEED)
    kept = {"image": arrays["image"], "row": train, "label": labels, "domain": domains, "is_test": is_validation}
    return kept | ({"image_digest": arrays["image_digest"]} if "image_digest" in arrays else {})


def load_dataset(cfg) -> tuple[DatasetInfo, dict[str, np.ndarray]]:
    """``cfg.dataset``'s rows as numpy arrays (in source order; the image block may be a read-only map).

    Sources that generate or decode in parallel do it with Ray Data, whose helper actors are stopped afterwards; the
    small bundled sources build their arrays in this process.
    """
    rows, info = SOURCES[cfg.dataset].read(cfg)
    arrays = _to_numpy(rows)
    del rows
    if _ray_data_used.is_set():  # a source ran Ray Data inside (the glyph generator); Ray may still be starting else
        _stop_ray_data()
    if len(arrays["label"]) == 0:
        raise ConfigError(f"dataset {cfg.dataset} has no rows")
    return info, validation_rows(arrays) if cfg.holdout == "validation" else arrays
