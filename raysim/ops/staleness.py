"""Staleness functions of asynchronous aggregation (``federation.staleness``): how much an update counts when ``tau``
server versions passed between the client's download and its arrival. Parsed without torch, so the config checks
them before anything heavy loads.

- ``constant``: s(tau) = 1.
- ``polynomial:A``: s(tau) = (1 + tau)^-A (Xie et al., "Asynchronous Federated Optimization", 2019, Sec. 5.2;
  FedBuff's default is A = 0.5, 1/sqrt(1 + tau): Nguyen et al., "Federated Learning with Buffered Asynchronous
  Aggregation", AISTATS 2022, Sec. 5).
- ``hinge:A,B``: s(tau) = 1 for tau <= B, else 1 / (A (tau - B) + 1) (Xie et al., Sec. 5.2).

FedBuff's tau is the versions since the download; FedAsync's step (:mod:`raysim.engine.buffered_step`) passes Xie et
al.'s t - tau, one more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FORMS = ("constant", "polynomial:A", "hinge:A,B")


@dataclass(frozen=True)
class Staleness:
    """A parsed staleness function; call it with tau (server versions since the download, >= 0)."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def __call__(self, tau: int) -> float:
        if self.kind == "polynomial":
            return (1.0 + tau) ** -self.a
        if self.kind == "hinge":
            return 1.0 if tau <= self.b else 1.0 / (self.a * (tau - self.b) + 1.0)
        return 1.0


def parse_staleness(text: str) -> Staleness:
    """``constant``, ``polynomial:A`` (A >= 0) or ``hinge:A,B`` (A >= 0, B >= 0); a ValueError saying what is wrong
    otherwise."""
    kind, _, value = str(text).partition(":")
    if kind == "constant" and not value:
        return Staleness(kind)
    try:
        numbers = [float(v) for v in value.split(",")] if value else []
    except ValueError:
        numbers = []
    wanted = {"polynomial": 1, "hinge": 2}.get(kind)
    if wanted is None:
        raise ValueError(f"{text!r} is not one of {', '.join(FORMS)}")
    if len(numbers) != wanted or not all(math.isfinite(n) and n >= 0 for n in numbers):
        example = "polynomial:0.5" if kind == "polynomial" else "hinge:10,4"
        raise ValueError(f"{text!r}: {kind} takes {wanted} number(s) >= 0, e.g. {example}")
    return Staleness(kind, *numbers)
