"""What a FedGCR client's feature mean reveals: its type and its classes, read off the nearest public rows.

A FedGCR, FedGC or FedGR client sends h_tilde, the class-balanced mean of its rows' type-specific features (FedGCR,
Zheng et al., AAAI 2024, Eq. 4: GC-Net of the frozen backbone's class token; FedGR: the class token itself), so that
the server can cluster clients by type "without sending type labels". The attacker, the server, holds public rows of
the same distribution (here: the test rows of every other client) and the mapping the client used (the frozen
backbone and, for GC-Net, the weights the client sent beside h_tilde); it ranks the public rows by the cosine of
their feature to h_tilde and reads, among the ``k`` nearest:

- the type: the most common domain (ties to the lower id), right or wrong against the client's own;
- the classes: the share of the ``k`` whose label is one the client holds (label precision), beside the share of the
  whole pool with such labels, which is what an attacker that received nothing guesses at random.

Sending nothing is the baseline: the most common type among the other clients (the population's type mix, which an
uninformed attacker may know), and the pool's base rate of the client's labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from raysim.data.shards import ClientData


@dataclass
class FeatureInference:
    """One client's h_tilde read against a public pool of ``pool_rows`` rows: the type guessed, the other clients'
    most common type (the guess of an attacker that received nothing) and the client's own, the label precision of the
    ``nearest`` public rows (pool indices, nearest first) and the pool's base rate of the client's labels."""

    client: int
    guessed_type: int
    baseline_type: int
    true_type: int
    label_precision: float
    label_base_rate: float
    nearest: np.ndarray
    pool_rows: int

    @property
    def type_recovered(self) -> bool:
        return self.guessed_type == self.true_type

    @property
    def baseline_recovered(self) -> bool:
        return self.baseline_type == self.true_type


def nearest_rows(h_tilde: torch.Tensor, public: torch.Tensor, k: int) -> np.ndarray:
    """Indices of the ``k`` rows of ``public`` ``[N, D]`` of highest cosine with ``h_tilde`` ``[D]``, nearest first
    (ties to the lower index)."""
    cosine = F.cosine_similarity(public.double(), h_tilde.double()[None], dim=1).numpy()
    return np.lexsort((np.arange(len(cosine)), -cosine))[:k]


def read_off(
    client: int,
    h_tilde: torch.Tensor,
    public: torch.Tensor,
    pool: ClientData,
    baseline_type: int,
    own: ClientData,
    own_type: int,
    k: int,
) -> FeatureInference:
    """The type and classes ``h_tilde`` reveals among ``public`` (the pool rows' features, row-aligned with
    ``pool``), beside ``baseline_type``, the guess of an attacker that received nothing; ``own``: the client's rows
    and ``own_type`` its type, read only to score."""
    nearest = nearest_rows(h_tilde, public, k)
    held = np.isin(pool.labels, np.unique(own.labels))
    precision, base_rate = float(held[nearest].mean()), float(held.mean())
    guessed = most_common(pool.domains[nearest])
    return FeatureInference(client, guessed, baseline_type, own_type, precision, base_rate, nearest, len(pool))


def most_common(values: np.ndarray) -> int:
    """The most common of the non-negative integers ``values`` (ties to the lowest)."""
    return int(np.bincount(values).argmax())
