"""Offline LiRA, the likelihood-ratio membership test of Carlini, Chien, Nasr, Song, Terzis and Tramèr ("Membership
Inference Attacks From First Principles", S&P 2022, Section IV and Algorithm 1, offline variant).

A row's confidence is scaled to ``phi = log(p_y / (1 - p_y))``, where it is close to Gaussian over models trained
without the row (OUT). The attacker trains shadow models that never saw the attacked rows, fits each row's OUT
Gaussian, and tests whether the attacked model's confidence is higher than the OUT models give that row: a row that
is easy for every model is no longer taken for a member because its loss is low. The offline test is one-sided, the
probability under OUT of a confidence below the observed one (the paper's Section IV-C; its released code scores the
OUT log-density instead): ``Lambda = Phi((phi_target - mu_out) / sigma_out)``. Its ROC is that of the z-score,
which is scored here (it does not round to 1 where the confidence is far out). With few shadows the paper fixes one
variance for every row; so does this.
"""

from __future__ import annotations

import numpy as np
import torch


def logit_confidence(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """phi = log(p_y / (1 - p_y)) of each row's true label ``y`` under softmax(``logits``), computed as
    ``z_y - logsumexp_{j != y} z_j`` (exact, and finite where ``p_y`` rounds to 1)."""
    true = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], float("-inf"))
    return true - torch.logsumexp(others, dim=1)


def offline_scores(target: np.ndarray, shadows: np.ndarray) -> np.ndarray:
    """The z-score of each row's confidence under the attacked model (``target`` [N]) against its OUT Gaussian from
    ``shadows`` [K, N] (the same rows under K models that never trained on them): the mean over the shadows per row,
    one standard deviation over every OUT value. Higher: more likely a member."""
    shadows = np.asarray(shadows, dtype=np.float64)
    if shadows.ndim != 2 or shadows.shape[1] != len(target) or not len(shadows):
        raise ValueError(f"shadows must be [K >= 1, {len(target)}], got {list(shadows.shape)}")
    spread = shadows.std()
    return (np.asarray(target, dtype=np.float64) - shadows.mean(axis=0)) / (spread if spread > 0 else 1.0)
