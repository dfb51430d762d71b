"""Generated glyph datasets, rendered offline with PIL from the fonts that matplotlib ships.

Every image is a pure function of (dataset, seed, row id): a glyph drawn in one of the bundled fonts
(:func:`bundled_fonts`: the 21 DejaVu, STIX and Computer Modern faces whose glyphs for ``0-9A-Za-z`` are
named as those characters) with the font's own baseline and size (so ``o`` stays smaller than ``O``), then
augmented: stroke width, rotation, scale, shift and an elastic warp in one resampling, a 2x box
downsample, and a *look* (ink and paper colours with a gradient, random colours, a natural photo patch
blended as in MNIST-M, or a binarised 16x16 rendering as in USPS) plus Gaussian noise. Rows are rendered
by Ray Data from row ids, so the result does not depend on how the work is split, then cached as one
parquet file per dataset (:func:`cached_path`) and read back with pyarrow. All images
are 32x32 RGB uint8; the test split is :func:`~raysim.data.sources.fixed_test_split` (20% of every
(domain, class) cell, independent of the run seed).

Datasets (seed :data:`SEED`):

* ``glyphs62``: 62 classes ``0-9A-Za-z``; each of the 21 bundled fonts is a writer (``domain`` = font
  index, so the ``domains`` partition gives one writer per client, as LEAF splits FEMNIST) and writes every
  character 6 times: 126 images per class, 7,812 in all, paper look (1 of the 6 per cell is test).
* ``digits5``: 10 digit classes x 5 domains x 60 = 3,000 images (Digit-Five in spirit): (0) scikit-learn's
  real handwritten digits (a seeded 60 per class), 8x8 upsampled; (1) the 11 serif fonts (DejaVu Serif,
  STIX, cmr/cmb/cmti), random colours; (2) the 5 monospace fonts (DejaVu Sans Mono, cmtt) on paper; (3) the 5
  sans fonts (DejaVu Sans, cmss) blended over patches of scikit-learn's two sample photographs (MNIST-M);
  (4) all 21 fonts binarised at 16x16, white on black, upsampled (USPS).
* ``five-sources``: five sources with disjoint labels, 100 images per class, 9,000 in all (Five-datasets
  in spirit): rendered digits ``0-9`` (labels 0-9, low-res look), upper case ``A-Z`` (10-35, paper),
  lower case ``a-z`` (36-61, photo), the 18 symbols ``! # $ % & ( ) * + / < = > ? @ [ ] ~`` (62-79,
  colour) and 100 of scikit-learn's handwritten digits per class (80-89).

:func:`pretrain_corpus` renders the same way a disjoint corpus for pretraining the offline backbone:
letters of Greek, Cyrillic, Armenian, Georgian and Hebrew, arrows, mathematical operators and a few
shapes: 198 classes (:func:`pretrain_chars`), none a benchmark character or a homoglyph of one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from raysim.base.errors import ConfigError
from raysim.base.owned_files import abandoned, owner_tag
from raysim.data.shards import DatasetInfo
from raysim.data.sources import cache_dir, fixed_test_split, ray_data, rows_table, sklearn_digits

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SEED = 0
SIZE = 32
DIGITS = "0123456789"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LOWER = "abcdefghijklmnopqrstuvwxyz"
ALNUM = DIGITS + UPPER + LOWER
SYMBOLS = "!#$%&()*+/<=>?@[]~"
BENCHMARK_CHARS = ALNUM + SYMBOLS

GLYPHS62_PER_WRITER = 6
DIGITS5_PER_CELL = 60
FIVE_SOURCES_PER_CLASS = 100
BLOCK_ROWS = 500  # rendered rows per Ray Data block

_FILL = 0.8  # height of a font's ascender-to-descender box, as a fraction of the image
_MISSING = "\U0010fffd"  # a private-use code point no bundled font maps: renders the missing-glyph box

# Candidate pretraining characters: (first, last) code points per block, in a fixed order.
_PRETRAIN_BLOCKS = (
    (0x0391, 0x03A9),
    (0x03B1, 0x03C9),
    (0x0400, 0x045F),
    (0x0531, 0x0556),
    (0x0561, 0x0586),
    (0x10D0, 0x10F0),
    (0x05D0, 0x05EA),
    (0x2190, 0x2199),
    (0x21D0, 0x21D5),
    (0x2200, 0x222F),
    (0x2260, 0x226F),
    (0x25B2, 0x25C7),
    (0x2660, 0x266F),
)
# Characters that look like a Latin letter, a digit or a benchmark symbol (at the benchmark's augmentation).
_HOMOGLYPHS = (
    "ΑΒΕΖΗΙΚΜΝΟΡΤΥΧΛΘ"
    "αγεηθικμνορςστυχω"  # Greek
    "АВЕЗКМНОРСТУХЅІЇЈЁЀЬЌЎ"
    "авгдезийкмнопрстухцшщьѓѕіїјёѐќўђћъѝ"  # Cyrillic (and its italics)
    "ԱՍՕՏԼՈՑՁԶՅՌՒ"
    "աըզլհնոռստրւցօքյ"  # Armenian
    "ვოიძყ"
    "וזןיךסחהט"  # Georgian, Hebrew
    "∂∈∊∕∣∗∘∙∔∼−∖∪∩∧∨∅∁∟∠∤∥∦∶∷∹≀○◯◌◍♭♯"  # operators, shapes
    "▵▹▿◃◅▻►◄"
)  # small or pointer duplicates of the triangles
_SIMILAR = 0.7  # aspect-preserving mask IoU at or above which two characters count as lookalikes
_PRETRAIN_MIN_FONTS = 3


@dataclass(frozen=True)
class Style:
    """How a domain draws its glyphs: augmentation ranges and a look.

    Attributes:
        rotate: maximum rotation in degrees.
        scale: range of the scale factor.
        shift: maximum shift, as a fraction of the image side.
        stroke: maximum extra stroke width, in pixels of the 2x render.
        elastic: standard deviation of the elastic displacement, in pixels of the 2x render.
        noise: standard deviation of the additive pixel noise (0-255).
        look: ``paper``, ``colour``, ``photo`` or ``lowres``.
    """

    rotate: float = 12.0
    scale: tuple[float, float] = (0.85, 1.1)
    shift: float = 0.06
    stroke: int = 2
    elastic: float = 1.2
    noise: float = 6.0
    look: str = "paper"


PAPER = Style()
COLOUR = Style(look="colour")
PHOTO = Style(stroke=3, noise=4.0, look="photo")
LOWRES = Style(rotate=15.0, scale=(0.9, 1.15), stroke=2, elastic=2.0, noise=0.0, look="lowres")
STYLES = (PAPER, COLOUR, PHOTO, LOWRES)
REAL = -1  # style index of a scikit-learn handwritten digit


@dataclass(frozen=True)
class _Plan:
    """What every row of a dataset is; the images are rendered from it.

    ``code`` is the character's code point (or the scikit-learn digit's index for ``style == REAL``) and
    ``font`` an index into ``fonts``.
    """

    name: str
    seed: int
    size: int
    fonts: tuple[str, ...]
    code: np.ndarray
    font: np.ndarray
    style: np.ndarray
    label: np.ndarray
    domain: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    def digest(self) -> str:
        """A short hash of everything that determines the images, the renderer included: Pillow and FreeType
        versions change antialiasing, hence pixels (a cache rendered by another Pillow is not reused)."""
        fonts = [(Path(f).name, Path(f).stat().st_size) for f in self.fonts]
        h = hashlib.sha256(
            repr(
                (FORMAT_VERSION, self.name, self.seed, self.size, fonts, renderer(), [asdict(s) for s in STYLES])
            ).encode()
        )
        for column in (self.code, self.font, self.style, self.label, self.domain):
            h.update(np.ascontiguousarray(column, dtype=np.int64).tobytes())
        return h.hexdigest()[:12]


def renderer() -> tuple[str, str | None]:
    """(Pillow version, FreeType version) that draw the glyphs."""
    import PIL
    from PIL import features

    return PIL.__version__, features.version("freetype2")


# Fonts and drawing -----------------------------------------------------------------------------------


def font_dir() -> Path:
    """The folder of TrueType fonts that matplotlib ships."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


@cache
def bundled_fonts() -> list[Path]:
    """matplotlib's fonts whose glyphs for ``0-9A-Za-z`` are those characters, sorted by file name."""
    return sorted((p for p in font_dir().glob("*.ttf") if all(_named(p, c) for c in ALNUM)), key=lambda p: p.name)


@cache
def _cmap(path: Path) -> dict[int, str]:
    from fontTools.ttLib import TTFont

    return TTFont(path, lazy=True).getBestCmap() or {}


def _named(path: Path, ch: str) -> bool:
    """Whether the font maps ``ch`` to a glyph named as ``ch`` (TeX fonts map ``<`` to ``exclamdown``)."""
    from fontTools import agl

    name = _cmap(path).get(ord(ch))
    return name is not None and agl.toUnicode(name) == ch


@cache
def covers(path: Path, ch: str) -> bool:
    """Whether the font draws ``ch``: a glyph named as ``ch`` whose mask is neither empty nor the missing box."""
    if not _named(path, ch):
        return False
    mask = draw(ch, path, 2 * SIZE)
    return bool(mask.any()) and not np.array_equal(mask, draw(_MISSING, path, 2 * SIZE))


@cache
def _layout(path: Path, canvas: int):
    """The font sized so its ``0-9A-Za-z`` box fills ``_FILL`` of the canvas, and the baseline that centres it."""
    from PIL import ImageFont

    reference = ImageFont.truetype(str(path), 100)
    boxes = np.array([reference.getbbox(c, anchor="ls") for c in ALNUM])
    top, bottom = boxes[:, 1].min(), boxes[:, 3].max()
    pixels = 100 * _FILL * canvas / (bottom - top)
    return ImageFont.truetype(str(path), max(1, round(pixels))), canvas / 2 - (top + bottom) / 2 * pixels / 100


def draw(ch: str, path: Path, canvas: int, stroke: int = 0) -> np.ndarray:
    """``ch`` in the font, white on black, uint8 [canvas, canvas]: on the font's baseline, centred across."""
    from PIL import Image, ImageDraw

    font, baseline = _layout(path, canvas)
    left, _, right, _ = font.getbbox(ch, anchor="ls", stroke_width=stroke)
    image = Image.new("L", (canvas, canvas))
    ImageDraw.Draw(image).text(
        (canvas / 2 - (left + right) / 2, baseline),
        ch,
        font=font,
        fill=255,
        anchor="ls",
        stroke_width=stroke,
        stroke_fill=255,
    )
    return np.asarray(image)


# Augmentation and looks ------------------------------------------------------------------------------


def _glyph_mask(ch: str, path: Path, style: Style, rng: np.random.Generator, size: int) -> np.ndarray:
    """Augmented ink coverage in [0, 1], float32 [size, size]: drawn at 2x, warped once, box-downsampled."""
    from scipy.ndimage import map_coordinates

    canvas = 2 * size
    mask = draw(ch, path, canvas, int(rng.integers(0, style.stroke + 1))).astype(np.float32) / 255
    angle = np.deg2rad(rng.uniform(-style.rotate, style.rotate))
    scale = rng.uniform(*style.scale)
    shift = rng.uniform(-style.shift, style.shift, 2) * canvas
    up = _upsampler(4, canvas)
    field = up @ rng.normal(0, style.elastic, (2, 4, 4)) @ up.T  # a smooth elastic displacement per axis
    centre = (canvas - 1) / 2
    y, x = np.mgrid[:canvas, :canvas] - centre
    y, x = y - shift[0], x - shift[1]
    cos, sin = np.cos(angle) / scale, np.sin(angle) / scale
    source = np.stack([centre + cos * y - sin * x, centre + sin * y + cos * x]) + field
    warped = map_coordinates(mask, source, order=1, cval=0.0)
    return warped.reshape(size, 2, size, 2).mean(axis=(1, 3))


@cache
def _upsampler(n: int, length: int) -> np.ndarray:
    """The [length, n] matrix that interpolates n evenly spaced values linearly onto length points."""
    position = np.linspace(0, n - 1, length)
    return np.clip(1 - np.abs(position[:, None] - np.arange(n)[None, :]), 0, None)


def _gradient(rng: np.random.Generator, size: int, amplitude: float) -> np.ndarray:
    """A linear ramp in a random direction, [size, size, 1], from -amplitude to +amplitude."""
    angle = rng.uniform(0, 2 * np.pi)
    y, x = (np.mgrid[:size, :size] - (size - 1) / 2) / size
    return (amplitude * 2 * (np.cos(angle) * x + np.sin(angle) * y))[..., None]


def _luma(rgb: np.ndarray) -> float:
    return float(rgb @ np.array([0.299, 0.587, 0.114]))


def _contrasting_colours(rng: np.random.Generator, contrast: float = 90.0) -> tuple[np.ndarray, np.ndarray]:
    """Random (ink, background) colours whose luma differs by at least ``contrast``."""
    background = rng.uniform(0, 255, 3)
    while True:
        ink = rng.uniform(0, 255, 3)
        if abs(_luma(ink) - _luma(background)) >= contrast:
            return ink, background


@cache
def _photos() -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_sample_images

    return tuple(load_sample_images().images)


def _photo_patch(rng: np.random.Generator, size: int) -> np.ndarray:
    """A random square crop of one of scikit-learn's sample photographs, resized to [size, size, 3]."""
    from PIL import Image

    photo = _photos()[int(rng.integers(len(_photos())))]
    side = int(rng.integers(size, min(4 * size, *photo.shape[:2]) + 1))
    top, left = (int(rng.integers(0, extent - side + 1)) for extent in photo.shape[:2])
    crop = Image.fromarray(photo[top : top + side, left : left + side])
    return np.asarray(crop.resize((size, size), Image.BILINEAR), dtype=np.float32)


def _compose(mask: np.ndarray, look: str, rng: np.random.Generator) -> np.ndarray:
    """Colour a mask [size, size] with a look: float32 [size, size, 3] before noise."""
    size = mask.shape[0]
    m = mask[..., None]
    if look == "paper":
        paper = rng.uniform(190, 250) + rng.uniform(-12, 12, 3) + _gradient(rng, size, 15)
        ink = rng.uniform(0, 80) + rng.uniform(-15, 15, 3)
        return paper * (1 - m) + ink * m
    if look == "colour":
        ink, background = _contrasting_colours(rng)
        return (background + _gradient(rng, size, 25)) * (1 - m) + ink * m
    if look == "photo":
        return np.abs(_photo_patch(rng, size) - 255 * m)
    if look == "lowres":
        return np.repeat(255 * _lowres(mask)[..., None], 3, axis=2)
    raise ValueError(f"unknown look {look!r}")


def _lowres(mask: np.ndarray) -> np.ndarray:
    """Binarise the mask at half resolution and upsample it bilinearly (a USPS-like scan)."""
    from PIL import Image

    size = mask.shape[0]
    half = (mask.reshape(size // 2, 2, size // 2, 2).mean(axis=(1, 3)) >= 0.4).astype(np.uint8) * 255
    return np.asarray(Image.fromarray(half).resize((size, size), Image.BILINEAR), dtype=np.float32) / 255


def _real_digit(index: int, size: int) -> np.ndarray:
    """scikit-learn digit ``index`` upsampled bilinearly to [size, size, 3]."""
    from PIL import Image

    grey = Image.fromarray(sklearn_digits()[0][index]).resize((size, size), Image.BILINEAR)
    return np.repeat(np.asarray(grey)[..., None], 3, axis=2)


def _render_row(plan: _Plan, row: int) -> np.ndarray:
    """Row ``row`` of the plan as uint8 [size, size, 3]; a pure function of (plan, row)."""
    if plan.style[row] == REAL:
        return _real_digit(int(plan.code[row]), plan.size)
    rng = np.random.default_rng([plan.seed, zlib.crc32(plan.name.encode()), row])
    style = STYLES[plan.style[row]]
    mask = _glyph_mask(chr(plan.code[row]), Path(plan.fonts[plan.font[row]]), style, rng, plan.size)
    image = _compose(mask, style.look, rng)
    if style.noise:
        image = image + rng.normal(0, style.noise, image.shape)
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def _render_batch(batch: dict, plan: _Plan) -> dict:
    ids = np.asarray(batch["id"], dtype=np.int64)
    return {"id": ids, "image": _render_ids(plan, ids)}


def _render_ids(plan: _Plan, ids) -> np.ndarray:
    images = np.empty((len(ids), plan.size, plan.size, 3), dtype=np.uint8)
    for k, row in enumerate(ids):
        images[k] = _render_row(plan, int(row))
    return images


# Plans -----------------------------------------------------------------------------------------------


def _glyph_rows(
    chars: str,
    fonts: list[Path],
    per_class: int,
    label0: int,
    domain: int | None,
    style: int | None,
    family: str | None = None,
) -> dict[str, np.ndarray]:
    """``per_class`` rows per character, cycling through the fonts (of ``family``, if given) that draw it.

    ``domain=None`` makes the font the domain; ``style=None`` cycles through all looks.
    """
    columns = {key: [] for key in ("code", "font", "style", "label", "domain")}
    for i, ch in enumerate(chars):
        drawn = [f for f, path in enumerate(fonts) if covers(path, ch) and family in (None, _family(path))]
        for k in range(per_class):
            font = drawn[(k + i) % len(drawn)]
            columns["code"].append(ord(ch))
            columns["font"].append(font)
            columns["style"].append(k % len(STYLES) if style is None else style)
            columns["label"].append(label0 + i)
            columns["domain"].append(font if domain is None else domain)
    return {key: np.asarray(values, dtype=np.int64) for key, values in columns.items()}


def _handwritten_rows(per_class: int, label0: int, domain: int, seed: int) -> dict[str, np.ndarray]:
    """``per_class`` scikit-learn digits per class, a seeded choice without replacement."""
    labels = sklearn_digits()[1]
    rng = np.random.default_rng([seed, label0, domain])
    index = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in range(10)])
    return {
        "code": index,
        "font": np.zeros_like(index),
        "style": np.full_like(index, REAL),
        "label": label0 + labels[index],
        "domain": np.full_like(index, domain),
    }


def _plan(name: str, seed: int, fonts: list[Path], parts: list[dict[str, np.ndarray]], size: int = SIZE) -> _Plan:
    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    return _Plan(name, seed, size, tuple(str(f) for f in fonts), **columns)


def _family(path: Path) -> str:
    """``mono``, ``sans`` or ``serif``, from the file name."""
    if "Mono" in path.stem or path.stem == "cmtt10":
        return "mono"
    if path.stem.startswith("DejaVuSans") or path.stem == "cmss10":
        return "sans"
    return "serif"


def _glyphs62(seed: int = SEED, per_writer: int = GLYPHS62_PER_WRITER) -> tuple[_Plan, DatasetInfo]:
    fonts = bundled_fonts()
    rows = _glyph_rows(ALNUM, fonts, per_writer * len(fonts), 0, None, STYLES.index(PAPER))
    coarse = tuple(0 if ch in DIGITS else 1 if ch in UPPER else 2 for ch in ALNUM)  # digit / upper / lower
    info = DatasetInfo(
        "glyphs62", len(ALNUM), len(fonts), (SIZE, SIZE, 3), tuple(ALNUM), tuple(f.stem for f in fonts), coarse
    )
    return _plan("glyphs62", seed, fonts, [rows]), info


DIGITS5_DOMAINS = ("handwritten", "serif", "mono", "photo-blend", "low-res")
# most clients first under a DIF, as FedGCR's authors order Digit-Five (MNIST, USPS, SynthDigits, MNIST-M, SVHN):
# handwritten, low-res, mono, photo-blend, and the coloured serif digits as SVHN, the rarest
DIGITS5_IMBALANCE = (0, 4, 2, 3, 1)
IMBALANCE_ORDERED = frozenset({"digits5"})  # the generated sets whose DatasetInfo has an imbalance_order


def _digits5(seed: int = SEED, per_cell: int = DIGITS5_PER_CELL) -> tuple[_Plan, DatasetInfo]:
    fonts = bundled_fonts()
    rendered = [("serif", COLOUR), ("mono", PAPER), ("sans", PHOTO), (None, LOWRES)]
    parts = [_handwritten_rows(per_cell, 0, 0, seed)]
    for domain, (family, style) in enumerate(rendered, start=1):
        parts.append(_glyph_rows(DIGITS, fonts, per_cell, 0, domain, STYLES.index(style), family))
    info = DatasetInfo(
        "digits5",
        10,
        len(DIGITS5_DOMAINS),
        (SIZE, SIZE, 3),
        tuple(DIGITS),
        DIGITS5_DOMAINS,
        imbalance_order=DIGITS5_IMBALANCE,
    )
    return _plan("digits5", seed, fonts, parts), info


FIVE_SOURCES = (
    ("digits", DIGITS, LOWRES),
    ("upper", UPPER, PAPER),
    ("lower", LOWER, PHOTO),
    ("symbols", SYMBOLS, COLOUR),
)


def _five_sources(seed: int = SEED, per_class: int = FIVE_SOURCES_PER_CLASS) -> tuple[_Plan, DatasetInfo]:
    fonts = bundled_fonts()
    parts, names, label0 = [], [], 0
    for domain, (_, chars, style) in enumerate(FIVE_SOURCES):
        parts.append(_glyph_rows(chars, fonts, per_class, label0, domain, STYLES.index(style)))
        names += list(chars)
        label0 += len(chars)
    parts.append(_handwritten_rows(per_class, label0, len(FIVE_SOURCES), seed))
    names += [f"handwritten {d}" for d in DIGITS]
    domains = tuple(name for name, _, _ in FIVE_SOURCES) + ("handwritten",)
    info = DatasetInfo("five-sources", len(names), len(domains), (SIZE, SIZE, 3), tuple(names), domains)
    return _plan("five-sources", seed, fonts, parts), info


_PLANS: dict[str, Callable[[], tuple[_Plan, DatasetInfo]]] = {
    "glyphs62": _glyphs62,
    "digits5": _digits5,
    "five-sources": _five_sources,
}


# Cache and Ray Data ----------------------------------------------------------------------------------


def _path(plan: _Plan) -> Path:
    return cache_dir() / f"{plan.name}-v{FORMAT_VERSION}-{plan.digest()}.parquet"


def cached_path(name: str) -> Path:
    """Where dataset ``name`` (default parameters) is cached; the file exists once it has been generated."""
    return _path(_PLANS[name]()[0])


def _render_all(plan: _Plan) -> np.ndarray:
    """Every row's image, rendered by Ray Data in blocks of ``BLOCK_ROWS`` and returned in row order."""
    ds = ray_data().range(len(plan), override_num_blocks=max(1, -(-len(plan) // BLOCK_ROWS)))
    batches = list(
        ds.map_batches(partial(_render_batch, plan=plan), batch_size=None).iter_batches(
            batch_size=None, batch_format="numpy"
        )
    )
    ids = np.concatenate([b["id"] for b in batches])
    return np.concatenate([b["image"] for b in batches])[np.argsort(ids)]


def _generate(plan: _Plan):
    """The plan's row table: images rendered with Ray Data, the fixed test split."""
    return rows_table(_render_all(plan), plan.label, plan.domain, fixed_test_split(plan.label, plan.domain))


def _write_atomically(table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    for left in abandoned(path.parent, ".*.parquet.*", lambda name: name.split(".parquet.", 1)[1]):
        left.unlink(missing_ok=True)  # a write its killed process left
    temporary = path.with_name(f".{path.name}.{owner_tag()}")
    try:
        pq.write_table(table, temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _read(plan: _Plan, info: DatasetInfo):
    """The plan's rows from the cache (read with pyarrow: nothing of Ray stays behind), generating and caching them
    first if absent."""
    import pyarrow.parquet as pq

    path = _path(plan)
    if path.exists():
        log.info("reading cached %s from %s", plan.name, path)
    else:
        start = time.perf_counter()
        _write_atomically(_generate(plan), path)
        log.info("generated %s (%d rows) in %.1f s into %s", plan.name, len(plan), time.perf_counter() - start, path)
    table = pq.read_table(path)
    arrays = {name: table[name].to_numpy() for name in table.column_names if name != "image"}
    return {"image": _image_block(table["image"], info.image_shape), **arrays}, info


def _image_block(column, shape: tuple[int, ...]) -> np.ndarray:
    """The cached image column (Ray Data's tensor type) as uint8 ``[rows, *shape]``, read from its list storage:
    the same whether or not Ray Data, which registers the type with pyarrow, was imported in this process (without
    it pyarrow reads the storage, whose rows ``to_numpy`` would give as objects)."""
    images = column.combine_chunks()
    if isinstance(images, pa.ExtensionArray):
        images = images.storage
    return images.flatten().to_numpy().reshape(len(images), *shape)


def read_glyphs62(_cfg):
    """62 classes ``0-9A-Za-z`` written by 21 font writers (``domain`` = font)."""
    return _read(*_glyphs62())


def read_digits5(_cfg):
    """Digits in five domains: handwritten, serif, mono, photo-blend, low-res."""
    return _read(*_digits5())


def read_five_sources(_cfg):
    """Five sources with disjoint labels: digits, upper, lower, symbols, handwritten digits."""
    return _read(*_five_sources())


GLYPH_SOURCES: dict[str, tuple[str, Callable]] = {
    "glyphs62": (
        "generated glyphs 0-9A-Za-z, 32x32, 62 classes x 21 font writers (domain = writer), "
        "7,812 images (offline FEMNIST analogue)",
        read_glyphs62,
    ),
    "digits5": (
        "generated digits in 5 domains (handwritten, serif, mono, photo-blend, low-res), 32x32, "
        "3,000 images (offline Digit-Five analogue)",
        read_digits5,
    ),
    "five-sources": (
        "5 generated sources with disjoint labels (digits, A-Z, a-z, 18 symbols, handwritten "
        "digits), 32x32, 90 classes, 9,000 images (offline Five-datasets analogue)",
        read_five_sources,
    ),
}


# Pretraining corpus ----------------------------------------------------------------------------------


def _shape(ch: str, path: Path, size: int = 20) -> np.ndarray:
    """The glyph's mask cropped to its box and scaled, aspect kept, into [size, size] (flattened, in [0, 1])."""
    from PIL import Image

    image = Image.fromarray(draw(ch, path, 4 * SIZE))
    crop = image.crop(image.getbbox())
    factor = size / max(crop.size)
    crop = crop.resize((max(1, round(crop.width * factor)), max(1, round(crop.height * factor))), Image.BILINEAR)
    out = Image.new("L", (size, size))
    out.paste(crop, ((size - crop.width) // 2, (size - crop.height) // 2))
    return np.asarray(out, dtype=np.float32).reshape(-1) / 255


def _max_iou(shape: np.ndarray, others: list[np.ndarray]) -> float:
    if not others:
        return 0.0
    stack = np.stack(others)
    return float((np.minimum(shape, stack).sum(1) / np.maximum(shape, stack).sum(1).clip(1e-6)).max())


@cache
def pretrain_chars() -> str:
    """The pretraining classes, in a fixed order.

    A candidate is kept when it is no listed homoglyph, at least 3 bundled fonts draw it, and in DejaVu
    Sans its shape overlaps no benchmark character's and no kept character's by ``_SIMILAR`` or more.
    """
    fonts, reference = bundled_fonts(), font_dir() / "DejaVuSans.ttf"
    benchmark = [_shape(c, reference) for c in BENCHMARK_CHARS]
    kept, shapes = [], []
    for first, last in _PRETRAIN_BLOCKS:
        for ch in map(chr, range(first, last + 1)):
            drawn_by = sum(covers(f, ch) for f in fonts)
            if ch in _HOMOGLYPHS or not covers(reference, ch) or drawn_by < _PRETRAIN_MIN_FONTS:
                continue
            shape = _shape(ch, reference)
            if max(_max_iou(shape, benchmark), _max_iou(shape, shapes)) < _SIMILAR:
                kept.append(ch)
                shapes.append(shape)
    return "".join(kept)


def pretrain_corpus(per_class: int, seed: int, size: int = SIZE) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Augmented glyphs of :func:`pretrain_chars`, disjoint from every benchmark character.

    Each class cycles through the fonts that draw it and through all four looks. Rendered with Ray Data
    when Ray is initialised, else in this process (about 1 ms an image); the images are the same either way.

    Returns:
        images uint8 [N, size, size, 3], labels int64 [N] (class index, ``per_class`` rows each), the
        class characters.
    """
    import ray

    if size < 8 or size % 2:
        raise ConfigError(f"pretraining image size {size} must be an even number of pixels, at least 8")
    chars = pretrain_chars()
    fonts = bundled_fonts()
    plan = _plan("pretrain", seed, fonts, [_glyph_rows(chars, fonts, per_class, 0, 0, None)], size)
    images = _render_all(plan) if ray.is_initialized() else _render_ids(plan, range(len(plan)))
    return images, plan.label.copy(), list(chars)
