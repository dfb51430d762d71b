"""Data sources: one table of rows, ``image`` (uint8), ``label``, ``domain``, ``is_test``.

Every source returns its rows (a ``ray.data.Dataset`` where generating or decoding runs in parallel tasks, or numpy
arrays, e.g. from a parquet file read with pyarrow) and a :class:`DatasetInfo`; :func:`load_dataset` materialises
them once on the driver.
Train/test splits that a source does not define are made per (domain, class) cell with a fixed seed,
so the test set never depends on the run seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from raysim.base.errors import ConfigError
from raysim.base.named import Registry
from raysim.base.ray_start import ensure_ray
from raysim.data.shards import DatasetInfo

SPLIT_SEED = 20240611
VALIDATION_SEED = SPLIT_SEED + 1  # the validation rows' draw, apart from the test split's


def cache_dir() -> Path:
    """Where generated and decoded data sets are cached: ``$RAYSIM_CACHE``, default ``~/.cache/raysim``."""
    folder = Path(os.environ.get("RAYSIM_CACHE", "~/.cache/raysim")).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"the data cache {folder} is a file, not a folder; set RAYSIM_CACHE to a folder")
    return folder


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


SOURCES: Registry[Source] = Registry("dataset", load="raysim.data")  # the package adds the others (parquet, ...)
for _source in (
    Source("digits", "scikit-learn's real handwritten digits, 8x8, 10 classes, 1,797 images", _read_digits),
    Source(
        "synthetic", "deterministic 16x16 toy images, 10 classes in 5 coarse pairs x 3 colour domains", _read_synthetic
    ),
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
    the run's own local Ray started, not Ray's default (its dashboard, idle workers): :func:`ensure_ray`."""
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
    if cfg.image_size and arrays["image"].shape[1:] != (cfg.image_size, cfg.image_size, 3):  # grey too: RGB N x N
        arrays, info = _resized(arrays, info, cfg.image_size)
    return info, validation_rows(arrays) if cfg.holdout == "validation" else arrays


def _resized(arrays: dict[str, np.ndarray], info: DatasetInfo, size: int) -> tuple[dict, DatasetInfo]:
    """``data.image_size`` for a source that makes its images at its own size (the generated and bundled sets): each
    image RGB ``size`` x ``size``, as the parquet and folder sources resize theirs while they decode."""
    from raysim.data.image_values import fit_array

    images = np.stack([fit_array(image, size) for image in arrays["image"]])
    return {**arrays, "image": images}, dataclasses.replace(info, image_shape=images.shape[1:])
