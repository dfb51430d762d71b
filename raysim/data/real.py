"""The papers' real datasets, read from local files in their official on-disk formats.

CIFAR-10/100 come from the official *binary* version (never unpickled), Tiny-ImageNet from its release
folder, and Office-Caltech10, DomainNet (the 10-class subset of the prompt-FL literature), PACS and
Digit-Five from image folders ``<domain>/<class>/*.jpg|png``. Without ``--data-dir``, CIFAR-10/100 and
Tiny-ImageNet are read from the data cache, where the first run that needs one downloads its archive
(:mod:`raysim.data.fetch`). Where to get each and the exact layouts are in docs/datasets.md. Image files are
decoded and resized with Ray Data; rows keep a sorted, deterministic order because the partition depends on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from raysim.base.errors import ConfigError
from raysim.data.image_values import eight_bit, fit_array
from raysim.data.shards import DatasetInfo
from raysim.data.sources import fixed_test_split, ray_data, rows_table

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
CIFAR_PIXELS = 3 * 32 * 32
FOLDER_IMAGE_SIZE = 224
BLOCK_ROWS = 512  # decoded files per Ray block
CIFAR_BLOCK_ROWS = 5000
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
DOMAINNET_CLASSES = (
    "bird",
    "feather",
    "headphones",
    "ice_cream",
    "teapot",
    "tiger",
    "whale",
    "windmill",
    "wine_glass",
    "zebra",
)


@dataclass(frozen=True)
class Layout:
    """What a dataset's folder must hold, for one-line errors that say how to fix it."""

    name: str
    expected: str
    url: str

    def missing(self, data_dir, failed_download: str = "") -> ConfigError:
        """The error for an unset data_dir or one that holds no copy of the dataset (and why it was not downloaded)."""
        return ConfigError(
            f"dataset '{self.name}' needs --data-dir pointing at {self.expected}; got {data_dir!r}; "
            f"get it from {self.url}{failed_download} (see docs/datasets.md)"
        )

    def malformed(self, path: Path, problem: str) -> ConfigError:
        """The error for a file or folder of the dataset that is absent or not in the official format."""
        return ConfigError(f"{path} {problem}; dataset '{self.name}' expects {self.expected} (see docs/datasets.md)")

    def root(self, data_dir, folder: str, marker: str) -> Path:
        """``data_dir`` or its child ``folder``, whichever holds ``marker``; without ``data_dir``, the dataset's
        folder in the data cache, downloaded there first where it has a public archive (:mod:`raysim.data.fetch`)."""
        if not data_dir:
            return self.fetched()
        base = Path(data_dir)  # absolute already (DataConfig)
        for root in (base, base / folder):
            if (root / marker).exists():
                return root
        raise self.missing(data_dir)

    def fetched(self) -> Path:
        """The dataset's folder in the data cache, fetched on first use; without an archive, or where the download
        fails, the error for a missing dataset (saying what to download, its SHA-256 and where to put it)."""
        from raysim.data import fetch  # urllib and the archive formats: only for a dataset read without --data-dir

        if self.name not in fetch.ARCHIVES:
            raise self.missing(None)
        try:
            return fetch.fetch(self.name)
        except fetch.DownloadFailed as failed:
            raise self.missing(None, f"; {failed}") from None

    def file(self, root: Path, name: str) -> Path:
        """``root / name``, which must exist."""
        if not (root / name).is_file():
            raise self.malformed(root / name, "is missing")
        return root / name


CIFAR10 = Layout(
    "cifar10",
    "cifar-10-batches-bin/ (data_batch_1.bin .. data_batch_5.bin, test_batch.bin, "
    "batches.meta.txt; 1 label byte + 3072 pixel bytes per record) or its parent",
    CIFAR_URL,
)
CIFAR100 = Layout(
    "cifar100",
    "cifar-100-binary/ (train.bin, test.bin, fine_label_names.txt, coarse_label_names.txt; "
    "1 coarse + 1 fine label byte + 3072 pixel bytes per record) or its parent",
    CIFAR_URL,
)
TINY = Layout(
    "tiny-imagenet",
    "tiny-imagenet-200/ (wnids.txt, words.txt, train/<wnid>/images/*.JPEG, "
    "val/images/*.JPEG, val/val_annotations.txt) or its parent",
    TINY_URL,
)


def read_cifar10(cfg) -> tuple:
    """CIFAR-10 binary version: data_batch_1..5 are the train rows, test_batch the official test rows."""
    root = CIFAR10.root(cfg.data_dir, "cifar-10-batches-bin", "data_batch_1.bin")
    files = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    parts = [_cifar_records(CIFAR10.file(root, name), 1, CIFAR10) for name in files]
    labels = np.concatenate([p[0][:, 0] for p in parts])
    images = np.concatenate([p[1] for p in parts])
    is_test = np.concatenate([np.full(len(p[0]), name == "test_batch.bin") for name, p in zip(files, parts)])
    _check_labels(labels, 10, root, CIFAR10)
    names = _class_names(root / "batches.meta.txt", 10, CIFAR10)
    return _cifar_rows(images, labels, is_test, cfg.image_size), _cifar_info("cifar10", names, cfg.image_size)


def read_cifar100(cfg) -> tuple:
    """CIFAR-100 binary version with fine labels as classes and the coarse label of each fine class."""
    root = CIFAR100.root(cfg.data_dir, "cifar-100-binary", "train.bin")
    train = _cifar_records(CIFAR100.file(root, "train.bin"), 2, CIFAR100)
    test = _cifar_records(CIFAR100.file(root, "test.bin"), 2, CIFAR100)
    coarse, fine = np.concatenate([train[0], test[0]]).T
    _check_labels(coarse, 20, root, CIFAR100)
    _check_labels(fine, 100, root, CIFAR100)
    is_test = np.arange(len(fine)) >= len(train[0])
    names = _class_names(root / "fine_label_names.txt", 100, CIFAR100)
    info = _cifar_info("cifar100", names, cfg.image_size, _coarse_of_fine(coarse, fine, root))
    return _cifar_rows(np.concatenate([train[1], test[1]]), fine, is_test, cfg.image_size), info


def _cifar_records(path: Path, label_bytes: int, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Label bytes [N, label_bytes] and images [N, 32, 32, 3] of one CIFAR binary file.

    A record is its label bytes, then the 1024 red, 1024 green and 1024 blue bytes of a row-major 32x32 image.
    """
    record = label_bytes + CIFAR_PIXELS
    size = path.stat().st_size
    if size == 0 or size % record:
        raise layout.malformed(path, f"has {size} bytes, not a positive multiple of the {record}-byte record")
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, record)
    images = raw[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return raw[:, :label_bytes].astype(np.int64), images


def _check_labels(labels: np.ndarray, num_classes: int, root: Path, layout: Layout) -> None:
    """Labels must be below ``num_classes``."""
    if labels.max() >= num_classes:
        raise layout.malformed(root, f"has label {labels.max()} (at most {num_classes - 1} allowed)")


def _coarse_of_fine(coarse: np.ndarray, fine: np.ndarray, root: Path) -> tuple[int, ...]:
    """The one coarse label of each fine class, as the data pair them."""
    out = []
    for label in range(100):
        found = np.unique(coarse[fine == label])
        if len(found) != 1:
            problem = "never" if len(found) == 0 else f"with coarse labels {found.tolist()}, not one,"
            raise CIFAR100.malformed(root, f"has fine label {label} {problem} in train.bin/test.bin")
        out.append(int(found[0]))
    return tuple(out)


def _class_names(path: Path, num_classes: int, layout: Layout) -> tuple[str, ...]:
    """Names from a one-name-per-line file when it exists, else the class indices."""
    if not path.is_file():
        return tuple(str(c) for c in range(num_classes))
    names = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    if len(names) != num_classes:
        raise layout.malformed(path, f"has {len(names)} names, not {num_classes}")
    return names


def _cifar_info(
    name: str, class_names: tuple[str, ...], size: int | None, coarse: tuple[int, ...] | None = None
) -> DatasetInfo:
    """One domain named after the dataset; images ``size`` (default 32) square."""
    size = size or 32
    return DatasetInfo(name, len(class_names), 1, (size, size, 3), class_names, (name,), coarse)


def _cifar_rows(images: np.ndarray, labels: np.ndarray, is_test: np.ndarray, size: int | None):
    """The rows as a Ray dataset in blocks, resized with Ray Data when ``size`` is not 32."""
    table = rows_table(images, labels, np.zeros_like(labels), is_test)
    ds = ray_data().from_arrow([table.slice(lo, CIFAR_BLOCK_ROWS) for lo in range(0, table.num_rows, CIFAR_BLOCK_ROWS)])
    if size in (None, 32):
        return ds
    return ds.map_batches(partial(_resize_batch, size=size), batch_format="numpy")


def _resize_batch(batch: dict, size: int) -> dict:
    """Resize a numpy batch's ``image`` column to ``size`` x ``size``."""
    batch["image"] = np.stack([fit_array(image, size) for image in batch["image"]])
    return batch


def read_tiny_imagenet(cfg) -> tuple:
    """Tiny-ImageNet-200: train/<wnid>/images are the train rows, the official val set the test rows.

    Classes are the sorted wnids of wnids.txt, named by the first synonym in words.txt.
    """
    root = TINY.root(cfg.data_dir, "tiny-imagenet-200", "wnids.txt")
    wnids = sorted({line.strip() for line in root.joinpath("wnids.txt").read_text().splitlines() if line.strip()})
    if not wnids:
        raise TINY.malformed(root / "wnids.txt", "lists no wnids")
    index = {wnid: c for c, wnid in enumerate(wnids)}
    items = [
        _item(path, c, 0, False)
        for c, wnid in enumerate(wnids)
        for path in _image_files(root / "train" / wnid / "images", TINY)
    ]
    items += _tiny_val_items(root, index)
    size = cfg.image_size or 64
    info = DatasetInfo(
        "tiny-imagenet", len(wnids), 1, (size, size, 3), _tiny_names(root / "words.txt", wnids), ("tiny-imagenet",)
    )
    return _image_rows(items, size, TINY), info


def _tiny_val_items(root: Path, index: dict[str, int]) -> list[dict]:
    """Rows of val/val_annotations.txt (file, wnid, bounding box; tab-separated), in file order."""
    annotations = TINY.file(root / "val", "val_annotations.txt")
    items = []
    for number, line in enumerate(annotations.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise TINY.malformed(annotations, f"line {number} does not name an image and a wnid of wnids.txt")
        items.append(_item(root / "val" / "images" / fields[0], index[fields[1]], 0, True))
    if not items:
        raise TINY.malformed(annotations, "lists no images")
    return items


def _tiny_names(words: Path, wnids: list[str]) -> tuple[str, ...]:
    """The first synonym of each wnid in words.txt (``wnid<TAB>name, name, ...``), else the wnid."""
    names = {}
    if words.is_file():
        for line in words.read_text().splitlines():
            wnid, _, text = line.partition("\t")
            names[wnid] = text.split(",")[0].strip()
    return tuple(names.get(wnid) or wnid for wnid in wnids)


@dataclass(frozen=True)
class FolderDataset:
    """A multi-domain image-folder dataset: its domains (index = domain id) and sorted class folders."""

    name: str
    domains: tuple[str, ...]
    classes: tuple[str, ...]
    url: str
    about: str
    imbalance_order: tuple[str, ...] | None = None  # most clients first under a DIF (FedGCR's authors' decay_order)

    @property
    def layout(self) -> Layout:
        expected = (
            f"a folder with {', '.join(d + '/' for d in self.domains)} each holding <class>/*.jpg|png "
            f"(or train/<class>/ and test/<class>/) for the classes {', '.join(self.classes)}"
        )
        return Layout(self.name, expected, self.url)

    @property
    def description(self) -> str:
        return (
            f"{self.about}: {len(self.domains)} domains x {len(self.classes)} classes from image folders, "
            f"224x224 unless data.image_size; get it from {self.url} (layout: docs/datasets.md)"
        )


FOLDER_DATASETS = (
    FolderDataset(
        "office-caltech10",
        ("amazon", "caltech", "dslr", "webcam"),
        (
            "back_pack",
            "bike",
            "calculator",
            "headphones",
            "keyboard",
            "laptop_computer",
            "monitor",
            "mouse",
            "mug",
            "projector",
        ),
        "https://github.com/pykale/data/tree/main/image_data/office",
        "Office-Caltech10",
    ),
    FolderDataset(
        "domainnet",
        ("clipart", "infograph", "painting", "quickdraw", "real", "sketch"),
        DOMAINNET_CLASSES,
        "http://ai.bu.edu/M3SDA/",
        "DomainNet, the 10-class subset",
        ("clipart", "real", "painting", "sketch", "quickdraw", "infograph"),  # fedgcr utils/util.py, DomainNet
    ),
    FolderDataset(
        "pacs",
        ("photo", "art_painting", "cartoon", "sketch"),
        ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person"),
        "https://dali-dl.github.io/project_iccv2017.html",
        "PACS",
    ),
    FolderDataset(
        "digit-five",
        ("mnist", "mnistm", "svhn", "syn", "usps"),
        tuple(str(d) for d in range(10)),
        "http://ai.bu.edu/M3SDA/",
        "Digit-Five (its .mat files converted to PNGs)",
        ("mnist", "usps", "syn", "mnistm", "svhn"),  # fedgcr utils/util.py prepare_digit_uneven: SVHN the rarest
    ),
)


def read_folders(spec: FolderDataset, cfg) -> tuple:
    """An image-folder dataset (see :class:`FolderDataset`); only its listed class folders are read.

    A domain's test rows are its ``test/`` folder when it has ``train/`` and ``test/``, else the files listed
    in ``<data_dir>/<domain>_test.txt`` (DomainNet's official split) when that exists, else a fixed 20% of
    every (domain, class) cell.
    """
    layout = spec.layout
    base = Path(cfg.data_dir) if cfg.data_dir else None  # absolute already (DataConfig)
    if base is None or not any((base / domain).is_dir() for domain in spec.domains):
        raise layout.missing(cfg.data_dir)
    items = [item for d, domain in enumerate(spec.domains) for item in _domain_items(base, d, domain, spec)]
    _fill_fixed_split(items)
    size = cfg.image_size or FOLDER_IMAGE_SIZE
    order = tuple(spec.domains.index(d) for d in spec.imbalance_order) if spec.imbalance_order else None
    info = DatasetInfo(
        spec.name,
        len(spec.classes),
        len(spec.domains),
        (size, size, 3),
        spec.classes,
        spec.domains,
        imbalance_order=order,
    )
    return _image_rows(items, size, layout), info


def _domain_items(base: Path, d: int, domain: str, spec: FolderDataset) -> list[dict]:
    """One domain's rows; ``is_test`` is None where the data define no split."""
    folder = base / domain
    if not folder.is_dir():
        raise spec.layout.malformed(folder, "is missing")
    if (folder / "train").is_dir() and (folder / "test").is_dir():
        return _class_items(folder / "train", d, spec, False) + _class_items(folder / "test", d, spec, True)
    items = _class_items(folder, d, spec, None)
    split_file = base / f"{domain}_test.txt"
    if split_file.is_file():
        listed = {line.split()[0] for line in split_file.read_text().splitlines() if line.strip()}
        for item in items:
            item["is_test"] = Path(item["path"]).relative_to(base).as_posix() in listed
        if not any(item["is_test"] for item in items):
            raise spec.layout.malformed(
                split_file,
                f"lists none of the images under {domain}/ (lines should read '<domain>/<class>/<file> <label>')",
            )
    return items


def _class_items(folder: Path, d: int, spec: FolderDataset, is_test: bool | None) -> list[dict]:
    """Rows of ``folder/<class>/`` for every class of ``spec``, in class order."""
    return [
        _item(path, c, d, is_test)
        for c, name in enumerate(spec.classes)
        for path in _image_files(folder / name, spec.layout)
    ]


def _fill_fixed_split(items: list[dict]) -> None:
    """Give rows without a split the fixed per-(domain, class) test split."""
    rows = [i for i, item in enumerate(items) if item["is_test"] is None]
    if rows:
        labels = np.array([items[i]["label"] for i in rows])
        domains = np.array([items[i]["domain"] for i in rows])
        for i, is_test in zip(rows, fixed_test_split(labels, domains)):
            items[i]["is_test"] = bool(is_test)


def _image_files(folder: Path, layout: Layout) -> list[Path]:
    """The sorted .jpg/.jpeg/.png files (any case) of a folder that must exist and hold at least one."""
    if not folder.is_dir():
        raise layout.malformed(folder, "is missing")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise layout.malformed(folder, "has no .jpg/.jpeg/.png images")
    return files


def _item(path: Path, label: int, domain: int, is_test: bool | None) -> dict:
    """One row before decoding: the file and its labels."""
    return {"path": str(path), "label": label, "domain": domain, "is_test": is_test}


def _image_rows(items: list[dict], size: int, layout: Layout):
    """Decode the listed files with Ray Data into ``size`` x ``size`` RGB rows, in the listed order.

    The rows are materialised here so that a file that cannot be decoded is a one-line ConfigError.
    """
    blocks = max(1, -(-len(items) // BLOCK_ROWS))
    ds = ray_data().from_items(items, override_num_blocks=blocks)
    ds = ds.map_batches(partial(_decode_batch, size=size), batch_format="numpy", batch_size=None).materialize()
    for batch in ds.select_columns(["error"]).iter_batches(batch_size=None, batch_format="numpy"):
        errors = [error for error in batch["error"] if error]
        if errors:
            path, _, reason = errors[0].partition("\t")
            raise layout.malformed(Path(path), f"is not a readable image ({reason})")
    return ds.drop_columns(["error"])


def _decode_batch(batch: dict, size: int) -> dict:
    """Decode one batch of files; a file that fails gets a blank image and an ``error`` entry."""
    from PIL import Image

    images, errors = [], []
    for path in batch["path"]:
        try:
            with Image.open(path) as image:  # 16-bit grey by its high byte, as the parquet source reads it
                images.append(fit_array(eight_bit(image, 0, str(path)), size))
            errors.append("")
        except Exception as error:
            images.append(np.zeros((size, size, 3), np.uint8))
            errors.append(f"{path}\t{type(error).__name__}: {' '.join(str(error).split())}")
    return {
        "image": np.stack(images),
        "label": batch["label"].astype(np.int64),
        "domain": batch["domain"].astype(np.int64),
        "is_test": batch["is_test"].astype(bool),
        "error": np.array(errors, dtype=object),
    }


REAL_SOURCES: dict[str, tuple[str, Callable]] = {
    "cifar10": (
        "CIFAR-10, binary version (cifar-10-batches-bin/), 32x32, 10 classes, official test split; "
        f"get it from {CIFAR_URL}",
        read_cifar10,
    ),
    "cifar100": (
        "CIFAR-100, binary version (cifar-100-binary/), 32x32, 100 fine classes with 20 coarse labels, "
        f"official test split; get it from {CIFAR_URL}",
        read_cifar100,
    ),
    "tiny-imagenet": (
        f"Tiny-ImageNet-200 (tiny-imagenet-200/), 64x64, 200 classes, official val set as test; get it from {TINY_URL}",
        read_tiny_imagenet,
    ),
    **{spec.name: (spec.description, partial(read_folders, spec)) for spec in FOLDER_DATASETS},
}
