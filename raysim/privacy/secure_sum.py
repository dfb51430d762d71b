"""Secure aggregation's costs, as SecAgg+ runs it (Bell, Bonawitz, Gascon, Lepoint, Raykova, "Secure Single-Server
Aggregation with (Poly)Logarithmic Overhead", CCS 2020): each client agrees keys with k neighbours of a random
graph (k = O(log n); raysim takes k = min(n - 1, ceil(3 log2 n))), secret-shares its mask seeds with them, sends its
masked input, and in the unmasking step sends the shares the server asks for. The server recovers the sum of the
survivors' inputs when at least ``privacy.min_survivors`` of them arrive; fewer, and the round is lost.

Bytes per client, on top of the masked input (the update itself, quantised into a field of the same width):
up, 2 public keys + 2 k encrypted shares + k shares at unmasking; down, k neighbours' 2 public keys + 2 k shares.
X25519 public keys are 32 bytes; a share of a 32-byte seed is 32 bytes, 48 once encrypted (AES-GCM's 16-byte tag).
"""

from __future__ import annotations

import math

KEY_BYTES, SHARE_BYTES, SEALED_SHARE_BYTES = 32, 32, 48


def neighbours(n: int) -> int:
    """k: how many others each of ``n`` clients agrees keys with."""
    return 0 if n <= 1 else min(n - 1, math.ceil(3 * math.log2(n)))


def overhead(n: int) -> tuple[float, float]:
    """(down, up) bytes the protocol adds to each of a round's ``n`` clients."""
    k = neighbours(n)
    up = 2 * KEY_BYTES + 2 * k * SEALED_SHARE_BYTES + k * SHARE_BYTES
    down = k * 2 * KEY_BYTES + 2 * k * SEALED_SHARE_BYTES
    return float(down), float(up)
