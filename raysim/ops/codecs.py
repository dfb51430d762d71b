"""The uplink codecs by name (``compression.uplink``) and their parameters, parsed without torch so that the config
is built before anything heavy loads; the arithmetic is :mod:`raysim.ops.compression`."""

from __future__ import annotations

import math
from dataclasses import dataclass

CODECS = ("none", "qsgd", "topk", "randk")


@dataclass(frozen=True)
class Codec:
    """A parsed ``compression.uplink``: ``kind`` and its parameter (bits for qsgd, the kept fraction otherwise);
    ``bucket``: QSGD's numbers per norm (0: the whole tensor)."""

    kind: str
    parameter: float = 0.0
    bucket: int = 0

    def kept(self, size: int) -> int:
        """k, the coordinates a sparsifier keeps of ``size``."""
        return max(1, math.ceil(round(self.parameter * size, 9)))


def parse(text: str) -> Codec:
    """``none``, ``qsgd:BITS`` (1..16) or ``qsgd:BITS,BUCKET`` (a norm for every BUCKET numbers, at least 1),
    ``topk:FRACTION`` or ``randk:FRACTION`` (in (0, 1]); a ValueError that says what is wrong otherwise."""
    kind, _, value = str(text).partition(":")
    if kind == "none" and not value:
        return Codec("none")
    if kind not in CODECS[1:]:
        raise ValueError(f"{text!r} is not one of none, qsgd:BITS[,BUCKET], topk:FRACTION, randk:FRACTION")
    value, comma, bucket = value.partition(",") if kind == "qsgd" else (value, "", "")
    number, size = _number(value), _number(bucket) if comma else 0.0
    if kind == "qsgd":
        if not (number.is_integer() and 1 <= number <= 16):
            raise ValueError(f"{text!r}: qsgd takes whole bits in 1..16, e.g. qsgd:8")
        if comma and not (size.is_integer() and size >= 1):
            raise ValueError(f"{text!r}: qsgd's bucket is a whole number of numbers per norm, e.g. qsgd:4,512")
        return Codec(kind, int(number), int(size))
    if not 0 < number <= 1:
        raise ValueError(f"{text!r}: {kind} takes the fraction kept, in (0, 1], e.g. {kind}:0.01")
    return Codec(kind, number)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
