"""FedGCR's group customisation helpers (algorithms/_group_custom.py): GC-Net and the clustering of clients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raysim.algorithms import _group_custom as gc


def test_gc_net_shape_and_initialisation_bounds():
    weights = gc.gc_net_parameters(8, torch.Generator().manual_seed(0))
    assert weights["gc_w1"].shape == (32, 8) and weights["gc_w2"].shape == (8, 32)
    assert weights["gc_w1"].abs().max() <= 1 / math.sqrt(8) and weights["gc_w2"].abs().max() <= 1 / math.sqrt(32)
    assert gc.gc_net(weights, torch.zeros(5, 8)).shape == (5, 8)


def test_gmm_recovers_well_separated_client_types():
    rng = np.random.default_rng(0)
    means = rng.normal(size=(3, 8)) * 10
    truth = np.repeat(np.arange(3), 6)
    reps = means[truth] + rng.normal(scale=0.1, size=(18, 8))
    labels, centres, mixture = gc.cluster_clients(reps, 3, seed=1)
    assert gc.cluster_accuracy(labels, truth) == 100.0
    for c in range(3):  # centres are the members' mean h_tilde
        assert np.allclose(centres[c], reps[labels == c].mean(axis=0))
    assert (mixture.predict(reps) == labels).all()
    again, _, _ = gc.cluster_clients(reps, 3, seed=1)
    assert (again == labels).all()


def test_cluster_accuracy_hand_computed():
    # cluster 0 = types {2, 2}: 2 hits; cluster 1 = types {2, 1, 1}: majority 1, 2 hits -> 4 / 5
    assert gc.cluster_accuracy(np.array([0, 0, 1, 1, 1]), np.array([2, 2, 2, 1, 1])) == pytest.approx(80.0)
