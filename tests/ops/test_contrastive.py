"""FedGC's formulas (FedGCR Eq. 4, 7, 8) and the GMM clustering, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from raysim.ops import contrastive as gc


def test_class_balanced_mean_weighs_classes_not_rows():
    h = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    assert gc.class_balanced_mean(h, torch.tensor([0, 0, 1])).tolist() == pytest.approx([1.0, 2.0])
    # the plain mean would leak the 2:1 label mix: [4/3, 4/3]


def test_gc_loss_hand_computed_with_and_without_h_prev():
    h, centres = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # logits / tau = [2 (own centre), 0 (other), -2 (h_prev)]
    with_prev = gc.gc_loss(h, centres, 0, torch.tensor([-1.0, 0.0]), tau=0.5)
    assert with_prev.item() == pytest.approx(math.log(math.exp(2) + 1 + math.exp(-2)) - 2)
    without = gc.gc_loss(h, centres, 0, None, tau=0.5)
    assert without.item() == pytest.approx(math.log(1 + math.exp(-2)))
    # the cluster index picks the numerator
    assert gc.gc_loss(h, centres, 1, None, tau=0.5).item() == pytest.approx(math.log(math.exp(2) + 1))


def test_gc_loss_cosine_variant_ignores_norms():
    h, centres = torch.tensor([[10.0, 0.0]]), torch.tensor([[3.0, 0.0], [0.0, 7.0]])
    assert gc.gc_loss(h, centres, 0, None, tau=0.5, kind="cosine").item() == pytest.approx(math.log(1 + math.exp(-2)))


def test_ra_loss_hand_computed():
    z, z0, z_prev = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    assert gc.ra_loss(z, z0, z_prev, tau=0.5).item() == pytest.approx(math.log(1 + math.exp(-2)))
    # dot products: z.z0 = 2, z.z_prev = 0 for z = [2, 0]; cosine (authors' code, no tau) sees 1 and 0
    z2 = torch.tensor([[2.0, 0.0]])
    assert gc.ra_loss(z2, z0, z_prev, tau=1.0).item() == pytest.approx(math.log(1 + math.exp(-2)))
    assert gc.ra_loss(z2, z0, z_prev, tau=1.0, kind="cosine").item() == pytest.approx(math.log(1 + math.exp(-1)))


def test_moon_model_contrastive_term_hand_computed():
    # MOON (Li, He, Song, CVPR 2021): cos(z, z_glob) = 0.6, cos(z, z_prev) = 0, tau = 0.5:
    # -log e^1.2 / (e^1.2 + e^0) = log(1 + e^-1.2) = 0.263282; l_RA in its cosine form is the same term
    z, z_glob, z_prev = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.6, 0.8]]), torch.tensor([[0.0, 3.0]])
    assert gc.ra_loss(z, z_glob, z_prev, tau=0.5, kind="cosine").item() == pytest.approx(0.263282, abs=1e-6)


@pytest.mark.parametrize("kind", ["dot", "cosine"])
def test_every_term_is_float32_under_bf16_autocast(kind):
    # a bf16 model's h and z: each term must equal its float32 value on the same inputs outside autocast; in bf16,
    # h_tilde's row sum and the logits' dot products are off by ~1e-2
    g = torch.Generator().manual_seed(0)
    h, z, z0, z_prev = (torch.randn(64, 192, generator=g).bfloat16() for _ in range(4))
    centres, h_prev, labels = torch.randn(3, 192, generator=g), torch.randn(192, generator=g), torch.arange(64) % 5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        terms = [
            gc.class_balanced_mean(h, labels),
            gc.gc_loss(h, centres, 1, h_prev, tau=0.5, kind=kind),
            gc.ra_loss(z, z0, z_prev, tau=0.5, kind=kind),
        ]
    exact = [
        gc.class_balanced_mean(h.float(), labels),
        gc.gc_loss(h.float(), centres, 1, h_prev, tau=0.5, kind=kind),
        gc.ra_loss(z.float(), z0.float(), z_prev.float(), tau=0.5, kind=kind),
    ]
    for term, reference in zip(terms, exact):
        torch.testing.assert_close(term, reference)
