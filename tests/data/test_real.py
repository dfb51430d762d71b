"""Real-dataset loaders on small fixtures written in the official on-disk formats."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PIL import Image

from raysim.base.errors import ConfigError
from raysim.config import DataConfig
from raysim.data import real as real_module
from raysim.data.real import DOMAINNET_CLASSES, FOLDER_DATASETS, REAL_SOURCES
from raysim.data.sources import fixed_test_split, load_dataset

PACS = next(spec for spec in FOLDER_DATASETS if spec.name == "pacs")
DOMAINNET = next(spec for spec in FOLDER_DATASETS if spec.name == "domainnet")


@pytest.fixture
def real(ray_session, monkeypatch):
    """Loads a real source (registered by ``raysim.data``) through ``load_dataset``."""

    def load(dataset, data_dir, **data):
        return load_dataset(DataConfig(dataset=dataset, data_dir=None if data_dir is None else str(data_dir), **data))

    return load


def one_line_error(load, dataset, data_dir, *fragments, **data) -> None:
    """Loading fails with a one-line ConfigError that contains every fragment."""
    with pytest.raises(ConfigError) as info:
        load(dataset, data_dir, **data)
    message = str(info.value)
    assert "\n" not in message and "docs/datasets.md" in message
    for fragment in fragments:
        assert fragment in message


# --- CIFAR binary ---------------------------------------------------------------------------------------------


def cifar_record(labels: tuple[int, ...], image: np.ndarray) -> bytes:
    """Label bytes, then the red, green and blue planes, each row-major 32x32 (the official format)."""
    planes = b"".join(image[:, :, channel].tobytes() for channel in range(3))
    return bytes(labels) + planes


def random_images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)


def write_cifar10(root, labels=((0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (7, 8, 9))):
    folder = root / "cifar-10-batches-bin"
    folder.mkdir()
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    images = random_images(sum(len(part) for part in labels), seed=1)
    row = 0
    for name, part in zip(names, labels):
        records = [cifar_record((label,), images[row + k]) for k, label in enumerate(part)]
        folder.joinpath(name).write_bytes(b"".join(records))
        row += len(part)
    folder.joinpath("batches.meta.txt").write_text("\n".join(f"name{c}" for c in range(10)) + "\n\n")
    return folder, images, np.concatenate([np.array(part) for part in labels])


COARSE_OF_FINE = tuple((7 * fine) % 20 for fine in range(100))


def write_cifar100(root, test_fine=(3, 50, 99)):
    folder = root / "cifar-100-binary"
    folder.mkdir()
    fine = np.concatenate([np.arange(100), test_fine])
    images = random_images(len(fine), seed=2)
    records = [cifar_record((COARSE_OF_FINE[f], f), image) for f, image in zip(fine, images)]
    folder.joinpath("train.bin").write_bytes(b"".join(records[:100]))
    folder.joinpath("test.bin").write_bytes(b"".join(records[100:]))
    folder.joinpath("fine_label_names.txt").write_text("\n".join(f"fine{f}" for f in range(100)) + "\n")
    folder.joinpath("coarse_label_names.txt").write_text("\n".join(f"coarse{c}" for c in range(20)) + "\n")
    return folder, images, fine


def test_cifar_record_layout_is_planar_rgb_row_major(real, tmp_path):
    image = np.zeros((32, 32, 3), np.uint8)
    image[..., 0] = np.arange(1024).reshape(32, 32) % 256
    image[..., 1], image[..., 2] = 20, 30
    folder, _, _ = write_cifar10(tmp_path)
    planes = bytes([5]) + (np.arange(1024) % 256).astype(np.uint8).tobytes() + bytes([20]) * 1024 + bytes([30]) * 1024
    folder.joinpath("test_batch.bin").write_bytes(planes)
    _, arrays = real("cifar10", folder)
    test_image = arrays["image"][arrays["is_test"]][0]
    assert (test_image == image).all()
    assert tuple(test_image[1, 0]) == (32, 20, 30) and tuple(test_image[0, 1]) == (1, 20, 30)


@pytest.mark.parametrize("at_parent", [False, True])
def test_cifar10_reads_batches_labels_and_official_split(real, tmp_path, monkeypatch, at_parent):
    monkeypatch.setattr(real_module, "CIFAR_BLOCK_ROWS", 4)  # several blocks: their order must be kept
    folder, images, labels = write_cifar10(tmp_path)
    info, arrays = real("cifar10", tmp_path if at_parent else folder)
    assert info.num_classes == 10 and info.num_domains == 1 and info.image_shape == (32, 32, 3)
    assert info.class_names == tuple(f"name{c}" for c in range(10))
    assert arrays["image"].dtype == np.uint8 and (arrays["image"] == images).all()
    assert arrays["label"].tolist() == labels.tolist()
    assert arrays["is_test"].tolist() == [False] * 10 + [True] * 3
    assert (arrays["domain"] == 0).all()


def test_cifar100_fine_labels_coarse_map_and_names(real, tmp_path):
    folder, images, fine = write_cifar100(tmp_path)
    info, arrays = real("cifar100", tmp_path)
    assert info.num_classes == 100 and info.coarse_of_class == COARSE_OF_FINE
    assert info.class_names[:2] == ("fine0", "fine1") and len(info.class_names) == 100
    assert arrays["label"].tolist() == fine.tolist() and (arrays["image"] == images).all()
    assert arrays["is_test"].sum() == 3 and arrays["is_test"][-3:].all()


def test_cifar_image_size_resizes_bilinearly_with_ray_data(real, tmp_path):
    folder, images, _ = write_cifar10(tmp_path)
    info, arrays = real("cifar10", folder, image_size=8)
    expected = np.stack([np.asarray(Image.fromarray(image).resize((8, 8), Image.BILINEAR)) for image in images])
    assert info.image_shape == (8, 8, 3) and arrays["image"].shape == (13, 8, 8, 3)
    assert (arrays["image"] == expected).all()


def test_cifar_errors_are_one_line_and_name_the_layout(real, tmp_path):
    one_line_error(
        real,
        "cifar100",
        None,
        "needs --data-dir pointing at cifar-100-binary/",
        "train.bin",
        "https://www.cs.toronto.edu/~kriz/cifar.html",
    )
    one_line_error(real, "cifar10", tmp_path, "needs --data-dir pointing at cifar-10-batches-bin/", str(tmp_path))
    folder, _, _ = write_cifar10(tmp_path)
    folder.joinpath("data_batch_3.bin").unlink()
    one_line_error(real, "cifar10", folder, "data_batch_3.bin is missing", "cifar-10-batches-bin/")
    folder.joinpath("data_batch_3.bin").write_bytes(b"\x00" * 3000)
    one_line_error(real, "cifar10", folder, "data_batch_3.bin has 3000 bytes", "3073-byte record")
    folder.joinpath("data_batch_3.bin").write_bytes(cifar_record((12,), random_images(1, 0)[0]))
    one_line_error(real, "cifar10", folder, "has label 12")


def test_cifar100_needs_one_coarse_label_per_fine_label(real, tmp_path):
    folder, _, _ = write_cifar100(tmp_path)
    train, test = folder.joinpath("train.bin").read_bytes(), folder.joinpath("test.bin").read_bytes()
    wrong = (COARSE_OF_FINE[50] + 1) % 20
    folder.joinpath("test.bin").write_bytes(bytes([wrong, 50]) + test[2:])
    one_line_error(real, "cifar100", folder, "fine label 50 with coarse labels", "cifar-100-binary/")
    folder.joinpath("test.bin").write_bytes(test)
    folder.joinpath("train.bin").write_bytes(train[2 + 3072 :])  # drops the only row of fine label 0
    one_line_error(real, "cifar100", folder, "fine label 0 never")


# --- Tiny-ImageNet ------------------------------------------------------------------------------------------

TINY_WNIDS = ("n02000000", "n01000000", "n03000000")  # wnids.txt order; classes are sorted


def save_image(path, colour, size=(64, 64), mode="RGB"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, colour).save(path)


def write_tiny(root):
    folder = root / "tiny-imagenet-200"
    folder.mkdir()
    folder.joinpath("wnids.txt").write_text("\n".join(TINY_WNIDS) + "\n")
    folder.joinpath("words.txt").write_text(
        "n00000001\tentity\nn01000000\tgoldfish, Carassius auratus\nn02000000\tteapot\nn03000000\tbarn owl, Tyto alba\n"
    )
    for wnid in TINY_WNIDS:
        c = sorted(TINY_WNIDS).index(wnid)
        for k in range(2):
            save_image(folder / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", (40 * c, 200, 20 + 100 * k))
        folder.joinpath("train", wnid, f"{wnid}_boxes.txt").write_text("")
    save_image(folder / "train" / TINY_WNIDS[0] / "images" / f"{TINY_WNIDS[0]}_2.JPEG", 90, mode="L")
    save_image(folder / "val" / "images" / "val_0.JPEG", (10, 10, 250))
    save_image(folder / "val" / "images" / "val_1.JPEG", (250, 10, 10))
    folder.joinpath("val", "val_annotations.txt").write_text(
        f"val_0.JPEG\t{TINY_WNIDS[2]}\t0\t3\t60\t61\nval_1.JPEG\t{TINY_WNIDS[0]}\t5\t5\t40\t50\n"
    )
    return folder


def test_tiny_imagenet_train_folders_and_official_val_as_test(real, tmp_path):
    write_tiny(tmp_path)
    info, arrays = real("tiny-imagenet", tmp_path)
    assert info.num_classes == 3 and info.image_shape == (64, 64, 3)
    assert info.class_names == ("goldfish", "teapot", "barn owl")
    assert arrays["image"].shape == (9, 64, 64, 3)
    assert arrays["label"].tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 1]
    assert arrays["is_test"].tolist() == [False] * 7 + [True] * 2
    means = arrays["image"].reshape(9, -1, 3).mean(axis=1)
    assert np.allclose(means[0], (0, 200, 20), atol=3) and np.allclose(means[3], (40, 200, 120), atol=3)
    assert np.allclose(means[4], 90, atol=2)  # the greyscale JPEG, converted to RGB
    assert np.allclose(means[7], (10, 10, 250), atol=4) and np.allclose(means[8], (250, 10, 10), atol=4)


def test_tiny_imagenet_image_size(real, tmp_path):
    write_tiny(tmp_path)
    info, arrays = real("tiny-imagenet", tmp_path / "tiny-imagenet-200", image_size=16)
    assert info.image_shape == (16, 16, 3) and arrays["image"].shape == (9, 16, 16, 3)


def test_tiny_imagenet_errors(real, tmp_path):
    one_line_error(
        real, "tiny-imagenet", tmp_path, "needs --data-dir pointing at tiny-imagenet-200/", "tiny-imagenet-200.zip"
    )
    folder = write_tiny(tmp_path)
    annotations = folder / "val" / "val_annotations.txt"
    annotations.write_text(annotations.read_text() + "val_2.JPEG\tn09999999\t0\t0\t1\t1\n")
    one_line_error(real, "tiny-imagenet", folder, "val_annotations.txt line 3", "wnids.txt")
    annotations.write_text("val_0.JPEG\tn01000000\t0\t0\t1\t1\n")
    folder.joinpath("val", "images", "val_0.JPEG").write_bytes(b"not a jpeg")
    one_line_error(real, "tiny-imagenet", folder, "val_0.JPEG is not a readable image", "tiny-imagenet-200/")
    for path in folder.joinpath("train", TINY_WNIDS[1], "images").iterdir():
        path.unlink()
    one_line_error(real, "tiny-imagenet", folder, f"{TINY_WNIDS[1]}/images has no .jpg/.jpeg/.png images")


# --- image folders --------------------------------------------------------------------------------------------


def folder_image(d: int, c: int, k: int, size=(8, 8)) -> np.ndarray:
    """A distinct image per (domain, class, file): a gradient in blue, the ids in red and green."""
    image = np.empty((size[1], size[0], 3), np.uint8)
    image[..., 0], image[..., 1] = 50 * d + k, 20 * c
    image[..., 2] = np.arange(size[0] * size[1]).reshape(size[1], size[0]) % 256
    return image


def write_folders(root, spec, per_cell=3, split_domains=(), size=(8, 8)):
    """``root/<domain>/<class>/<k>.png`` (or under train/ and test/ for ``split_domains``) plus distractors."""
    for d, domain in enumerate(spec.domains):
        for c, name in enumerate(spec.classes):
            for k in range(per_cell):
                split = ("train" if k else "test") if domain in split_domains else ""
                suffix = ".PNG" if k == 1 else ".png"
                path = root / domain / split / name / f"{k}{suffix}"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(folder_image(d, c, k, size)).save(path, format="PNG")
        (root / domain / "zz_unlisted_class").mkdir()
        Image.fromarray(folder_image(d, 9, 0, size)).save(root / domain / "zz_unlisted_class" / "0.png")
        (root / domain / spec.classes[0] / "readme.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / domain / spec.classes[0] / "readme.txt").write_text("not an image")


def test_pacs_domains_classes_pixels_and_fixed_split(real, tmp_path, monkeypatch):
    monkeypatch.setattr(real_module, "BLOCK_ROWS", 5)  # 17 blocks decoded in parallel: their order must be kept
    write_folders(tmp_path, PACS)
    info, arrays = real("pacs", tmp_path, image_size=8)
    assert info.domain_names == ("photo", "art_painting", "cartoon", "sketch")
    assert info.class_names == ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
    assert info.num_domains == 4 and info.num_classes == 7 and info.image_shape == (8, 8, 3)
    cells = [(d, c, k) for d in range(4) for c in range(7) for k in range(3)]
    assert arrays["domain"].tolist() == [d for d, _, _ in cells]
    assert arrays["label"].tolist() == [c for _, c, _ in cells]
    assert (arrays["image"] == np.stack([folder_image(*cell) for cell in cells])).all()
    assert (arrays["is_test"] == fixed_test_split(arrays["label"], arrays["domain"])).all()
    assert arrays["is_test"].sum() == 28  # one of the three files of every (domain, class) cell


def test_a_sixteen_bit_grey_image_in_a_folder_is_read_by_its_high_byte(real, tmp_path):
    """As the parquet source reads it: not clipped to 255 (PIL's conversion of mode I;16 to RGB)."""
    write_folders(tmp_path, PACS, per_cell=1, size=(4, 4))
    deep = (np.arange(16).reshape(4, 4) * 4096 + 100).astype(np.uint16)
    Image.fromarray(deep).save(tmp_path / "photo" / "dog" / "0.png")
    _, arrays = real("pacs", tmp_path, image_size=4)
    assert np.array_equal(arrays["image"][0, ..., 0], (deep >> 8).astype(np.uint8))


def test_folder_images_are_converted_to_rgb_and_resized_to_224_by_default(real, tmp_path):
    write_folders(tmp_path, PACS, per_cell=1, size=(12, 10))
    grey = tmp_path / "photo" / "dog" / "0.png"
    Image.fromarray(folder_image(0, 0, 0, (12, 10))[..., 2]).save(grey)
    info, arrays = real("pacs", tmp_path)
    assert info.image_shape == (224, 224, 3) and arrays["image"].shape == (28, 224, 224, 3)
    expected = np.asarray(Image.fromarray(folder_image(0, 1, 0, (12, 10))).resize((224, 224), Image.BILINEAR))
    assert (arrays["image"][1] == expected).all()
    assert (arrays["image"][0, ..., 0] == arrays["image"][0, ..., 2]).all()


def test_domainnet_subset_split_folders_and_official_split_files(real, tmp_path):
    write_folders(tmp_path, DOMAINNET, per_cell=2, split_domains=("clipart",))
    listed = [f"painting/{name}/1.PNG 0" for name in DOMAINNET_CLASSES]
    tmp_path.joinpath("painting_test.txt").write_text("\n".join(listed + ["painting/aircraft_carrier/x.jpg 0"]))
    info, arrays = real("domainnet", tmp_path, image_size=8)
    assert info.class_names == DOMAINNET_CLASSES and info.num_domains == 6
    # most clients first under a DIF, as FedGCR's authors order them: clipart, real, painting, sketch, quickdraw,
    # infograph (the hardest, the rarest)
    assert [info.domain_names[d] for d in info.imbalance_order] == [
        "clipart",
        "real",
        "painting",
        "sketch",
        "quickdraw",
        "infograph",
    ]
    assert len(arrays["label"]) == 6 * 10 * 2  # the unlisted class folders are not read
    domain = arrays["domain"]
    clipart, painting = arrays["is_test"][domain == 0], arrays["is_test"][domain == 2]
    assert clipart.tolist() == [False] * 10 + [True] * 10  # train/ rows, then test/ rows, classes in order
    assert arrays["label"][domain == 0].tolist() == list(range(10)) + list(range(10))
    assert painting.tolist() == [False, True] * 10
    assert not arrays["is_test"][domain == 4].any()  # two files per cell: round(0.2 * 2) = 0 test rows


@pytest.mark.parametrize(
    "breakage, fragment",
    [
        (
            lambda root: [shutil.rmtree(root / domain) for domain in PACS.domains],
            "needs --data-dir pointing at a folder with photo/, art_painting/",
        ),
        (lambda root: shutil.rmtree(root / "sketch"), "sketch is missing"),
        (lambda root: shutil.rmtree(root / "cartoon" / "horse"), "cartoon/horse is missing"),
        (
            lambda root: [path.unlink() for path in (root / "art_painting" / "guitar").iterdir()],
            "art_painting/guitar has no .jpg/.jpeg/.png images",
        ),
        (
            lambda root: (root / "photo" / "house" / "0.png").write_bytes(b"\x89PNG broken"),
            "photo/house/0.png is not a readable image",
        ),
    ],
)
def test_folder_errors_are_one_line_and_name_the_layout(real, tmp_path, breakage, fragment):
    write_folders(tmp_path, PACS, per_cell=1)
    breakage(tmp_path)
    one_line_error(real, "pacs", tmp_path, fragment, "<class>/*.jpg|png", "dog, elephant", image_size=8)


def test_folder_dataset_without_data_dir(real):
    one_line_error(real, "office-caltech10", None, "needs --data-dir", "amazon/, caltech/, dslr/, webcam/", "back_pack")


def test_domainnet_split_file_that_lists_none_of_the_images(real, tmp_path):
    write_folders(tmp_path, DOMAINNET, per_cell=1)
    tmp_path.joinpath("real_test.txt").write_text("real/aircraft_carrier/real_001.jpg 0\n")
    one_line_error(real, "domainnet", tmp_path, "real_test.txt lists none of the images under real/", image_size=8)


def test_every_real_source_has_a_description_with_where_to_get_it():
    assert set(REAL_SOURCES) == {
        "cifar10",
        "cifar100",
        "tiny-imagenet",
        "office-caltech10",
        "domainnet",
        "pacs",
        "digit-five",
    }
    for description, read in REAL_SOURCES.values():
        assert "http" in description and "\n" not in description and callable(read)
