"""Images as raysim stores them: uint8 arrays, ``[H, W]`` (grey) or ``[H, W, 3]`` (RGB), from what a data set's
``image`` column may hold: PNG or JPEG bytes (any mode Pillow opens: palette, 1-bit, alpha, CMYK and 16-bit grey are
converted to 8-bit grey or RGB), arrays or nested lists of whole numbers 0-255, and fixed-shape tensor columns
(Arrow's canonical ``arrow.fixed_shape_tensor``, or Ray Data's tensor type, which ``ray.data``'s ``write_parquet``
writes). Anything else is refused in one line that names the row.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa

from raysim.base.errors import ConfigError

RAY_TENSOR_TYPES = ("ray.data.arrow_tensor", "ray.data.arrow_tensor_v2")
EXTENSION_NAME, EXTENSION_METADATA = b"ARROW:extension:name", b"ARROW:extension:metadata"
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
WRITE = "write uint8 arrays [H, W] or [H, W, 3] (0-255), or PNG/JPEG bytes"


def fit_image(image, size: int) -> np.ndarray:
    """An RGB [size, size, 3] uint8 array of a PIL image, resized bilinearly when its size differs."""
    from PIL import Image

    image = image.convert("RGB")
    if image.size != (size, size):
        image = image.resize((size, size), Image.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def fit_array(image: np.ndarray, size: int) -> np.ndarray:
    """:func:`fit_image` of a uint8 array image."""
    from PIL import Image

    return fit_image(Image.fromarray(image), size)


def tensor_shape(field: pa.Field, where: str) -> tuple[int, ...] | None:
    """Each row's shape when ``field`` is a fixed-shape tensor column, else None. Ray Data's type is read from the
    field's metadata where ``ray.data`` has not registered it in this process (pyarrow then reads its list storage),
    so a file reads the same whether or not ``ray.data`` was imported."""
    kind = field.type
    if isinstance(kind, pa.FixedShapeTensorType):
        return tuple(kind.shape)
    if isinstance(kind, pa.ExtensionType):
        name, shape = kind.extension_name, getattr(kind, "shape", None)
    else:
        metadata = field.metadata or {}
        name = metadata.get(EXTENSION_NAME, b"").decode()
        shape = json.loads(metadata[EXTENSION_METADATA]) if name in RAY_TENSOR_TYPES else None
    if not name:
        return None
    if name not in RAY_TENSOR_TYPES or shape is None:
        mixed = " (Ray Data's type for images of different sizes)" if "variable_shaped" in name else ""
        raise ConfigError(f"{where}: the image column is of type {name}{mixed}, which raysim cannot read; {WRITE}")
    return tuple(shape)


def tensor_rows(column: pa.Array, shape: tuple[int, ...], first_row: int, where: str) -> np.ndarray:
    """A batch of a fixed-shape tensor column (:func:`tensor_shape`) as checked uint8 ``[rows, *image]``."""
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise ConfigError(f"{where}: row {row} has no image (null); {WRITE}")
    if isinstance(column.type, pa.FixedShapeTensorType):
        values = column.to_numpy_ndarray()
    else:
        storage = column.storage if isinstance(column, pa.ExtensionArray) else column
        values = storage.flatten().to_numpy(zero_copy_only=False).reshape(len(column), *shape)
    return pixels(values, first_row, where, batch=True)


def decoded(value, row: int, where: str) -> np.ndarray:
    """One cell of the ``image`` column (image file bytes, Hugging Face's image struct of bytes and path, or an array
    as nested lists) as a checked uint8 image."""
    if value is None:
        raise ConfigError(f"{where}: row {row} has no image (null); {WRITE}")
    if isinstance(value, dict) and "bytes" in value:  # Hugging Face's Image feature: {"bytes": ..., "path": ...}
        if value["bytes"] is None:
            raise ConfigError(
                f"{where}: row {row}'s image holds a path ({value.get('path')!r}), not the image's bytes; write the "
                "images' bytes into the column (Hugging Face: save the data set with its images embedded)"
            )
        value = value["bytes"]
    if isinstance(value, (bytes, bytearray)):
        from PIL import Image

        try:
            image = Image.open(io.BytesIO(value))
            image.load()
        except Exception as error:  # Pillow raises several kinds for a damaged or foreign file
            raise ConfigError(f"{where}: row {row}'s image is not a readable image file ({error}); {WRITE}") from None
        return eight_bit(image, row, where)
    try:
        values = np.asarray(value)
    except ValueError:
        raise ConfigError(f"{where}: row {row}'s image is a ragged list, not an array; {WRITE}") from None
    return pixels(values, row, where)


def eight_bit(image, row: int, where: str) -> np.ndarray:
    """A PIL image as 8-bit grey or RGB: grey and RGB as they are, 16-bit grey by its high byte, 1-bit and grey with
    alpha as grey, every other mode (palette, alpha, CMYK, YCbCr, ...) as RGB."""
    if image.mode in ("L", "RGB"):
        return np.asarray(image)
    if image.mode in SIXTEEN_BIT_MODES:
        return (np.asarray(image).astype(np.uint16) >> 8).astype(np.uint8)
    if image.mode in ("I", "F"):
        raise ConfigError(f"{where}: row {row}'s image has 32-bit pixels (mode {image.mode}); {WRITE}")
    return np.asarray(image.convert("L" if image.mode in ("1", "LA", "La") else "RGB"))


def pixels(values: np.ndarray, first_row: int, where: str, batch: bool = False) -> np.ndarray:
    """``values`` (one image, or with ``batch`` a stack of them from ``first_row`` on) as uint8, grey ``[H, W]`` or
    RGB ``[H, W, 3]`` (``[H, W, 1]`` becomes grey), refused unless they are whole numbers 0-255 in such a shape."""
    shape = values.shape[1:] if batch else values.shape
    if not (len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3))):
        raise ConfigError(
            f"{where}: row {first_row}'s image has shape {tuple(shape)}, not [H, W] or [H, W, 3]; {WRITE}"
        )
    if values.dtype != np.uint8:
        if values.dtype.kind not in "iu":
            raise ConfigError(f"{where}: row {first_row}'s image holds {values.dtype} values, not 0-255; {WRITE}")
        outside = (values < 0) | (values > 255)
        if outside.any():
            offending = np.argwhere(outside)[0]
            row = first_row + (int(offending[0]) if batch else 0)
            raise ConfigError(f"{where}: row {row}'s image holds {int(values[tuple(offending)])}, not 0-255; {WRITE}")
        values = values.astype(np.uint8)
    return values[..., 0] if len(shape) == 3 and shape[2] == 1 else values
