"""The loss-threshold attack's ROC on constructed losses whose answer is known (a lower loss scores higher)."""

from __future__ import annotations

import numpy as np
import pytest

from raysim.attacks.membership import membership_roc


def loss_roc(member_losses, non_member_losses):
    return membership_roc(-member_losses, -non_member_losses)


def test_members_of_lower_loss_are_found_at_every_threshold():
    roc = loss_roc(np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0]))
    assert (roc.auc, roc.tpr_at_low_fpr) == (1.0, 1.0)


def test_members_of_higher_loss_are_never_found_first():
    roc = loss_roc(np.array([5.0, 6.0]), np.array([1.0, 2.0]))
    assert (roc.auc, roc.tpr_at_low_fpr) == (0.0, 0.0)


def test_interleaved_losses_give_the_share_of_pairs_ordered_right():
    # member 0.1 beats both non-members, 0.3 beats only 0.4: 3 of 4 pairs; at no false positive only 0.1 is found
    roc = loss_roc(np.array([0.1, 0.3]), np.array([0.2, 0.4]))
    assert roc.auc == pytest.approx(0.75)
    assert roc.tpr_at_low_fpr == pytest.approx(0.5)


def test_the_low_fpr_rate_counts_only_thresholds_below_one_percent():
    # 200 non-members: the two of lowest loss are 1% of them; one member below both, one between them and the rest
    non_members = np.concatenate([[0.05, 0.15], np.linspace(1.0, 2.0, 198)])
    roc = loss_roc(np.array([0.0, 0.1, 0.5, 3.0]), non_members)
    assert roc.tpr_at_low_fpr == pytest.approx(0.75)  # at FPR 1% (two non-members above) three members are in
