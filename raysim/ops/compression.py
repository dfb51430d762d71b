"""Compressed updates: a vector encoded into the bytes a client would send, and decoded from them.

Codecs (``compression.uplink``):
    ``qsgd:B``  QSGD (Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding",
        NeurIPS 2017): with s = 2^B - 1 levels, each coordinate v_i becomes ||v|| sign(v_i) l_i / s, l_i the level
        below s |v_i| / ||v|| or the one above, drawn with the probability that makes it unbiased
        (E[decoded] = v). Sent: the norm (float32), one sign bit and B level bits per coordinate, bit-packed.
    ``qsgd:B,D``  the same in buckets of D consecutive coordinates, each with its own norm, as Alistarh et al.
        quantise (the variance bound min(d / s^2, sqrt(d) / s) ||v||^2 then holds per bucket of d = D): a norm
        (float32) per bucket.
    ``topk:F``  the k = ceil(F d) coordinates of largest magnitude (Aji & Heafield 2017; Stich et al., "Sparsified
        SGD with Memory", NeurIPS 2018), the others zero. Sent: their indices (int32) and values (float32).
    ``randk:F``  k = ceil(F d) coordinates drawn uniformly, unscaled (biased, as top-k; meant with error feedback).
        Sent: the draw's seed (int64) and the values (float32); the receiver draws the same indices.

Error feedback (Seide et al. 2014; Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019): a client encodes
v + r and keeps r <- v + r - decoded for its next participation. The byte count is that of the encoded arrays.
"""

from __future__ import annotations

import numpy as np
import torch

from raysim.ops.codecs import Codec

Encoded = dict[str, np.ndarray]


def encode(codec: Codec, vector: torch.Tensor, generator: torch.Generator) -> Encoded:
    """The arrays a client sends for the float32 1-D ``vector``; ``generator`` draws QSGD's rounding and rand-k's
    seed."""
    v = vector.detach().to(torch.float32).cpu()
    if codec.kind == "qsgd":
        return _qsgd(v, int(codec.parameter), generator) if not codec.bucket else _bucketed(v, codec, generator)
    k = codec.kept(len(v))
    if codec.kind == "topk":
        index = np.sort(np.argpartition(-np.abs(v.numpy()), k - 1)[:k]).astype(np.int32)
        return {"index": index, "value": v.numpy()[index]}
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return {"seed": np.array([seed], dtype=np.int64), "value": v.numpy()[_random_index(seed, len(v), k)]}


def decode(codec: Codec, encoded: Encoded, size: int) -> torch.Tensor:
    """The float32 vector of ``size`` coordinates that ``encoded`` stands for."""
    if codec.kind == "qsgd":
        bits = int(codec.parameter)
        levels = _unpack(encoded["levels"], bits, size).astype(np.float32)
        signs = np.unpackbits(encoded["signs"], count=size).astype(np.float32)
        norms = encoded["norm"] if not codec.bucket else encoded["norm"][np.arange(size) // codec.bucket]
        return torch.from_numpy((1 - 2 * signs) * levels * (norms / np.float32(2**bits - 1)))
    out = np.zeros(size, dtype=np.float32)
    if codec.kind == "topk":
        out[encoded["index"]] = encoded["value"]
    else:
        out[_random_index(int(encoded["seed"][0]), size, len(encoded["value"]))] = encoded["value"]
    return torch.from_numpy(out)


def nbytes(encoded: Encoded) -> int:
    """What ``encoded`` occupies on the wire."""
    return sum(array.nbytes for array in encoded.values())


def _qsgd(v: torch.Tensor, bits: int, generator: torch.Generator) -> Encoded:
    s = 2**bits - 1
    norm = float(torch.linalg.vector_norm(v.double()))
    scaled = (v.abs().double() / norm * s) if norm > 0 else torch.zeros(len(v), dtype=torch.float64)
    return _rounded(v, scaled, np.array([norm], dtype=np.float32), bits, generator)


def _bucketed(v: torch.Tensor, codec: Codec, generator: torch.Generator) -> Encoded:
    """:func:`_qsgd` with a norm per ``codec.bucket`` consecutive coordinates (the last bucket may be shorter)."""
    s, width = 2**codec.parameter - 1, max(1, min(codec.bucket, len(v)))  # a bucket longer than v: v's length
    rows = -(-len(v) // width)
    blocks = torch.zeros(rows * width, dtype=torch.float64)
    blocks[: len(v)] = v.double()
    norms = torch.linalg.vector_norm(blocks.view(rows, width), dim=1)
    scaled = (blocks.view(rows, width).abs() / torch.where(norms > 0, norms, 1.0)[:, None] * s).reshape(-1)[: len(v)]
    return _rounded(v, scaled, norms.to(torch.float32).numpy(), int(codec.parameter), generator)


def _rounded(v: torch.Tensor, scaled: torch.Tensor, norms: np.ndarray, bits: int, generator) -> Encoded:
    """QSGD's message: ``scaled`` (each |v_i| over its norm, times the 2^bits - 1 levels) rounded stochastically to
    a neighbouring level, unbiased; the float32 ``norms``, v's signs and the levels, bit-packed."""
    floor = scaled.floor()
    up = torch.rand(len(v), generator=generator, dtype=torch.float64) < scaled - floor
    levels = (floor + up).clamp(max=2**bits - 1).to(torch.int64).numpy()
    return {"norm": norms, "signs": np.packbits((v < 0).numpy()), "levels": _pack(levels, bits)}


def _pack(levels: np.ndarray, bits: int) -> np.ndarray:
    """``bits`` bits per level (its low bits, least significant first), bit-packed."""
    planes = np.unpackbits(levels.astype("<u2").view(np.uint8).reshape(-1, 2), axis=1, bitorder="little")
    return np.packbits(planes[:, :bits].reshape(-1))


def _unpack(packed: np.ndarray, bits: int, size: int) -> np.ndarray:
    planes = np.zeros((size, 16), dtype=np.uint8)
    planes[:, :bits] = np.unpackbits(packed, count=size * bits).reshape(size, bits)
    return np.packbits(planes, axis=1, bitorder="little").view("<u2").reshape(-1)


def _random_index(seed: int, size: int, k: int) -> np.ndarray:
    """rand-k's coordinates, sorted: the same on both ends from the seed sent."""
    return np.sort(np.random.default_rng(seed).choice(size, size=k, replace=False))
