"""The uplink codecs on tiny vectors, against values computed by hand: QSGD's levels and unbiasedness, top-k and
rand-k, and the bytes each encoding occupies."""

from __future__ import annotations

import pytest
import torch

from raysim.ops.codecs import Codec, parse
from raysim.ops.compression import decode, encode, nbytes


def roundtrip(text, values, seed=0):
    codec = parse(text)
    vector = torch.tensor(values, dtype=torch.float32)
    encoded = encode(codec, vector, torch.Generator().manual_seed(seed))
    return encoded, decode(codec, encoded, len(vector))


def test_names_parse_and_bad_ones_say_what_is_accepted():
    assert parse("qsgd:8") == Codec("qsgd", 8) and parse("topk:0.01") == Codec("topk", 0.01)
    assert parse("none") == Codec("none") and parse("qsgd:4,512") == Codec("qsgd", 4, 512)
    for bad, fragment in [
        ("qsgd:4,0", "qsgd's bucket is a whole number of numbers per norm, e.g. qsgd:4,512"),
        ("qsgd:4,2.5", "qsgd's bucket is a whole number"),
        ("qsgd:4,many", "qsgd's bucket is a whole number"),
        ("qsgd:4,", "qsgd's bucket is a whole number"),
        ("qsgd:0", "whole bits in 1..16"),
        ("qsgd:17", "whole bits in 1..16"),
        ("qsgd:2.5", "whole bits in 1..16"),
        ("topk:0", "in (0, 1]"),
        ("randk:1.5", "in (0, 1]"),
        ("gzip", "is not one of none, qsgd:BITS[,BUCKET], topk:FRACTION, randk:FRACTION"),
    ]:
        with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            parse(bad)


def test_qsgd_levels_that_fall_on_a_level_are_exact():
    # ||v|| = 5; with 1 bit (s = 1) the scaled magnitudes 1 and 0 are levels already: nothing is drawn
    _, decoded = roundtrip("qsgd:1", [5.0, 0.0])
    assert decoded.tolist() == [5.0, 0.0]
    _, decoded = roundtrip("qsgd:2", [0.0, -3.0, 0.0])  # s = 3: |v| / ||v|| * s = 3, level 3 of 3
    assert decoded.tolist() == [0.0, -3.0, 0.0]


def test_qsgd_rounds_to_a_neighbouring_level_and_is_unbiased():
    values = [3.0, -4.0]  # s = 3: scaled 1.8 and 2.4; decoded 5/3 x level
    seen = set()
    total = torch.zeros(2, dtype=torch.float64)
    draws = 20_000
    for seed in range(draws):
        _, decoded = roundtrip("qsgd:2", values, seed)
        seen.add(tuple(round(x * 3 / 5) for x in decoded.tolist()))
        total += decoded.double()
    assert seen <= {(1, -2), (2, -2), (1, -3), (2, -3)} and len(seen) == 4
    # the mean of 20,000 draws is within 4 standard errors (each coordinate's spread is at most 5/3 x 1/2)
    assert (total / draws).tolist() == pytest.approx(values, abs=4 * (5 / 3 / 2) / draws**0.5)


def test_qsgd_in_buckets_scales_each_by_its_own_norm_and_stays_unbiased():
    values = [3.0, -4.0, 0.0, 0.0, 5.0]  # buckets of 2: norms 5, 0 and 5 (the last bucket is one number)
    encoded, decoded = roundtrip("qsgd:1,2", values)
    assert encoded["norm"].tolist() == [5.0, 0.0, 5.0] and decoded[2:].tolist() == [0.0, 0.0, 5.0]
    total, draws = torch.zeros(5, dtype=torch.float64), 20_000
    for seed in range(draws):
        total += roundtrip("qsgd:1,2", values, seed)[1].double()
    # s = 1: 3 and -4 decode to 0 or +-5, each coordinate's spread at most 5 x 1/2
    assert (total / draws).tolist() == pytest.approx(values, abs=4 * (5 / 2) / draws**0.5)


def test_a_qsgd_bucket_longer_than_the_tensor_is_one_bucket_of_the_tensor():
    whole, _ = roundtrip("qsgd:4", [3.0, -4.0, 1.0])
    encoded, decoded = roundtrip("qsgd:4,1000000000", [3.0, -4.0, 1.0])  # no bucket-sized buffer either way
    assert encoded["norm"].tolist() == whole["norm"].tolist() and nbytes(encoded) == nbytes(whole)
    assert decoded.tolist() == roundtrip("qsgd:4", [3.0, -4.0, 1.0])[1].tolist()


def test_qsgd_in_buckets_has_far_less_error_on_a_large_tensor():
    vector = torch.randn(16_384, generator=torch.Generator().manual_seed(0)).tolist()
    errors = {}
    for text in ("qsgd:4", "qsgd:4,512"):
        _, decoded = roundtrip(text, vector)
        errors[text] = float(((decoded - torch.tensor(vector)) ** 2).sum() / (torch.tensor(vector) ** 2).sum())
    # the bound min(d / s^2, sqrt(d) / s): 128 / 15 = 8.5 whole (5.7 here), sqrt(512) / 15 = 1.5 a bucket (0.38)
    assert errors["qsgd:4,512"] < errors["qsgd:4"] / 4


def test_topk_keeps_the_largest_magnitudes_and_randk_the_drawn_coordinates():
    encoded, decoded = roundtrip("topk:0.5", [3.0, -5.0, 1.0, 0.5])
    assert decoded.tolist() == [3.0, -5.0, 0.0, 0.0] and encoded["index"].tolist() == [0, 1]
    encoded, decoded = roundtrip("randk:0.25", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    kept = [i for i, x in enumerate(decoded.tolist()) if x]
    assert len(kept) == 2 and [decoded[i].item() for i in kept] == [i + 1.0 for i in kept]


def test_bytes_are_those_of_the_encoded_arrays():
    values = [float(i) - 50 for i in range(100)]
    assert nbytes(roundtrip("qsgd:8", values)[0]) == 4 + 13 + 100  # norm, 100 sign bits, 800 level bits
    assert nbytes(roundtrip("qsgd:3", values)[0]) == 4 + 13 + 38  # 300 level bits in 38 bytes
    assert nbytes(roundtrip("qsgd:8,32", values)[0]) == 4 * 4 + 13 + 100  # a norm for each of 4 buckets
    assert nbytes(roundtrip("topk:0.1", values)[0]) == 10 * 4 + 10 * 4  # int32 indices, float32 values
    assert nbytes(roundtrip("randk:0.1", values)[0]) == 8 + 10 * 4  # the seed, the values
