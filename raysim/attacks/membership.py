"""Membership inference by loss threshold (Yeom, Giacomelli, Fredrikson, Jha, "Privacy Risk in Machine Learning:
Analyzing the Connection to Overfitting", CSF 2018): a row whose loss under the model is low is guessed a training
row. Every threshold gives one (false positive rate, true positive rate); the attack is reported as the ROC's area
and its true positive rate at 1% false positives (Carlini et al., "Membership Inference Attacks From First
Principles", S&P 2022, which argue the low-FPR regime is the one that matters). ROC from scikit-learn.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score, roc_curve

from raysim.attacks.lira import logit_confidence
from raysim.core.training import batched_rows, evaluation_batch, model_inputs
from raysim.data.shards import ClientData

LOW_FPR = 0.01


@dataclass
class MembershipROC:
    """The ROC of a membership score: its curve, its area and the true positive rate at 1% false positives."""

    fpr: np.ndarray
    tpr: np.ndarray
    auc: float
    tpr_at_low_fpr: float


def membership_roc(member_scores: np.ndarray, non_member_scores: np.ndarray) -> MembershipROC:
    """The ROC of a membership score, higher for a row more likely a member (the loss threshold scores minus the
    loss): members are the positives."""
    truth = np.concatenate([np.ones(len(member_scores)), np.zeros(len(non_member_scores))])
    scores = np.concatenate([member_scores, non_member_scores])
    fpr, tpr, _ = roc_curve(truth, scores, drop_intermediate=False)  # every threshold: the one at 1% may be collinear
    return MembershipROC(fpr, tpr, float(roc_auc_score(truth, scores)), float(tpr[fpr <= LOW_FPR].max()))


def row_losses(model, method, data: ClientData, device: torch.device) -> np.ndarray:
    """The cross-entropy of every row of ``data`` under the method's inference forward with the loaded tensors."""
    return _per_row(model, method, data, device, partial(F.cross_entropy, reduction="none"))


def row_confidences(model, method, data: ClientData, device: torch.device) -> np.ndarray:
    """LiRA's logit-scaled confidence in the true label (:func:`raysim.attacks.lira.logit_confidence`) of every row
    of ``data`` under the method's inference forward with the loaded tensors."""
    return _per_row(model, method, data, device, logit_confidence)


@torch.no_grad()
def _per_row(model, method, data: ClientData, device: torch.device, statistic) -> np.ndarray:
    """``statistic(logits, labels)`` of every row of ``data``, batch by batch."""
    values = [np.zeros(0)]
    model.eval()
    for rows in batched_rows(len(data), evaluation_batch(device)):
        logits = method.predict(model, model_inputs(model, data.images[rows], device), data, rows)
        labels = torch.as_tensor(data.labels[rows], device=logits.device).long()
        values.append(statistic(logits, labels).cpu().numpy())
    return np.concatenate(values)
