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


def test_the_low_fpr_rate_reads_a_threshold_that_lies_on_a_straight_stretch_of_the_curve():
    """Three tied groups of 20 members and 1 non-member (scores 5, 4, 3), 200 non-members in all: the threshold at
    3 admits 3 non-members (1.5%), the one at 4 two (1%) and 40 members. scikit-learn's default drops that point, as it
    lies on the straight line between its neighbours, which would leave 20 members (the threshold at 5)."""
    members = np.repeat([5.0, 4.0, 3.0, 0.0], [20, 20, 20, 40])
    non_members = np.concatenate([[5.0, 4.0, 3.0], np.full(197, -1.0)])
    roc = membership_roc(members, non_members)
    assert roc.tpr_at_low_fpr == pytest.approx(0.4)
