"""Group-prompt selection math (SGPT / FGPT) against hand-computed values on tiny tensors."""

import math

import numpy as np
import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.ops import selection as sel


def test_calibrated_selection_prefers_rarely_chosen_groups():
    cos = torch.tensor([[0.9, 0.5, 0.1]])
    # (1 - cos) * (q + eps) = [0.1 * 0.8005, 0.5 * 0.2005, 0.9 * 0.0005] = [0.08005, 0.10025, 0.00045]
    assert sel.select_calibrated(cos, torch.tensor([0.8, 0.2, 0.0]), eps=5e-4).tolist() == [2]
    # uniform shares: the rule is plain argmax cos
    assert sel.select_calibrated(cos, torch.full((3,), 1 / 3), eps=5e-4).tolist() == [0]


def test_eps_breaks_ties_between_never_chosen_groups_by_cosine():
    cos = torch.tensor([[0.2, 0.6, 0.9]])
    q = torch.tensor([0.0, 0.0, 1.0])
    # eps = 0: groups 0 and 1 both score 0 and the first wins; eps > 0: 0.8 eps vs 0.4 eps, group 1 wins
    assert sel.select_calibrated(cos, q, eps=0.0).tolist() == [0]
    assert sel.select_calibrated(cos, q, eps=5e-4).tolist() == [1]


def test_shares_are_cumulative_proportions_and_uniform_before_any_selection():
    assert torch.allclose(sel.shares(torch.tensor([2.0, 6.0, 0.0, 2.0])), torch.tensor([0.2, 0.6, 0.0, 0.2]))
    assert torch.allclose(sel.shares(torch.zeros(4)), torch.full((4,), 0.25))


def test_key_loss_is_minus_mean_cosine_of_the_selected_key_and_reaches_the_keys():
    keys = torch.tensor([[1.0, 0.0], [0.0, 2.0]], requires_grad=True)
    queries = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    cos = sel.cosine(queries, keys)  # [[0.6, 0.8], [1.0, 0.0]]
    loss = sel.key_loss(cos, torch.tensor([1, 0]))
    assert loss.item() == pytest.approx(-(0.8 + 1.0) / 2)
    loss.backward()
    assert keys.grad.abs().sum() > 0


def test_counts_and_group_weighted_mean_with_uniform_fallback():
    assert sel.counts(torch.tensor([0, 2, 2, 0, 0]), 4).tolist() == [3.0, 0.0, 2.0, 0.0]
    values = torch.tensor([[[1.0], [2.0], [3.0]], [[3.0], [4.0], [5.0]]])  # [clients, groups, 1]
    counts = torch.tensor([[3.0, 0.0, 0.0], [1.0, 2.0, 0.0]])
    # g0: (3*1 + 1*3) / 4 = 1.5; g1: (0*2 + 2*4) / 2 = 4; g2: nobody chose it -> plain mean (3 + 5) / 2 = 4
    assert sel.group_weighted_mean(values, counts).flatten().tolist() == [1.5, 4.0, 4.0]


def test_group_weighted_mean_falls_back_to_the_plain_mean_at_or_below_the_threshold():
    values = torch.tensor([[[1.0], [2.0], [3.0]], [[3.0], [4.0], [9.0]]])  # [clients, groups, 1]
    counts = torch.tensor([[1.0, 4.0, 2.0], [3.0, 1.0, 4.0]])  # totals per group: 4, 5, 6
    # paper (0): all weighted. g0 (1*1 + 3*3) / 4 = 2.5; g1 (4*2 + 1*4) / 5 = 2.4; g2 (2*3 + 4*9) / 6 = 7
    assert sel.group_weighted_mean(values, counts, 0).flatten().tolist() == pytest.approx([2.5, 2.4, 7.0])
    # authors' "<=": threshold 5 -> g0 (4, below) and g1 (5, at) take the plain mean (1+3)/2, (2+4)/2; g2 (6) weighted
    assert sel.group_weighted_mean(values, counts, 5).flatten().tolist() == pytest.approx([2.0, 3.0, 7.0])
    assert sel.group_weighted_mean(values, counts, 4).flatten().tolist() == pytest.approx([2.0, 2.4, 7.0])


def test_modal_gives_the_whole_batch_its_most_frequent_group_ties_to_the_lowest_also_under_vmap():
    assert sel.modal(torch.tensor([0, 2, 2, 1]), 3).tolist() == [2, 2, 2, 2]
    assert sel.modal(torch.tensor([1, 1, 0, 0, 2]), 3).tolist() == [0] * 5  # tie 0 / 1: np.argmax's first
    batches = torch.tensor([[0, 2, 2, 1], [1, 1, 0, 0], [3, 3, 3, 1]])  # cohort training: one batch per client
    out = torch.func.vmap(lambda picked: sel.modal(picked, 4))(batches)
    assert out.tolist() == [[2] * 4, [0] * 4, [3] * 4]


def test_momentum_is_eq_7():
    out = sel.momentum(torch.tensor([1.0, 3.0]), torch.tensor([3.0, 5.0]), 0.25)
    assert out.tolist() == [2.5, 4.5]
    assert torch.equal(sel.momentum(torch.ones(2), torch.zeros(2), 0.0), torch.zeros(2))


def gram_schmidt(rows: torch.Tensor) -> torch.Tensor:
    out = []
    for v in rows.double():
        for u in out:
            v = v - (v @ u) * u
        out.append(v / v.norm())
    return torch.stack(out).float()


def test_orthogonal_keys_are_gram_schmidt_of_xavier_draws():
    keys = sel.orthogonal_keys(4, 6, torch.Generator().manual_seed(0))
    assert keys.shape == (4, 6)
    assert torch.allclose(keys @ keys.T, torch.eye(4), atol=1e-6)
    bound = math.sqrt(6 / (4 + 6))
    draws = torch.empty(4, 6).uniform_(-bound, bound, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(keys, gram_schmidt(draws), atol=1e-5)
    with pytest.raises(ConfigError, match="groups <= the backbone width 6"):
        sel.orthogonal_keys(7, 6, torch.Generator())


def test_random_keys_are_unit_norm_and_not_orthogonal():
    keys = sel.random_keys(4, 6, torch.Generator().manual_seed(0))
    assert torch.allclose(keys.norm(dim=1), torch.ones(4))
    assert (keys @ keys.T - torch.eye(4)).abs().max() > 1e-3


def test_instability_is_the_second_halfs_std_of_each_clients_shares_averaged():
    early = [[9, 1], [5, 5]]  # the first half of the evaluations is left out
    counts = np.array([early, early, [[2, 2], [4, 0]], [[4, 0], [4, 0]]])  # [evaluations, clients, groups]
    # client 0's shares: (0.5, 0.5) then (1, 0): std 0.25 per group; client 1's stay (1, 0): 0
    assert sel.instability(counts) == pytest.approx((0.25 + 0.25 + 0 + 0) / 4)
    rowless = np.concatenate([counts, np.zeros((4, 1, 2))], axis=1)  # a third client without test rows
    assert sel.instability(rowless) == pytest.approx((0.25 + 0.25 + 0 + 0) / 4)  # selects nothing: not averaged in
    assert np.isnan(sel.instability(counts[:, :1] * 0))  # no client with rows: nothing to measure
    # one or two evaluations: the second half holds one, no spread to measure; of three it holds the last two
    assert np.isnan(sel.instability(counts[:1])) and np.isnan(sel.instability(counts[2:]))
    assert sel.instability(counts[1:]) == pytest.approx(sel.instability(counts))


def test_purity_entropy_and_congruence_by_hand():
    assigned = np.array([0, 0, 1, 1, 1])
    truth = np.array([7, 8, 8, 8, 7])
    assert sel.purity(assigned, truth) == pytest.approx(3 / 5)  # group 0: max 1, group 1: max 2
    assert sel.purity(np.zeros(5, int), truth) == pytest.approx(3 / 5)  # all in one group: the majority share
    kmeans = np.array([1, 1, 0, 0, 0])
    classes = np.array([0, 0, 1, 1, 2])
    # overlap: groups match K-Means exactly (1.0); Q_kmeans: classes 0, 1 wholly in one cluster, 2 too -> 1.0
    assert sel.congruence(assigned, kmeans, classes) == pytest.approx(1.0)
    classes = np.array([0, 1, 0, 1, 0])  # class 0: rows 0, 2, 4 -> clusters 1, 0, 0 (max 2); class 1: 1, 3 -> 1, 0
    assert sel.congruence(assigned, kmeans, classes) == pytest.approx(1.0 / (3 / 5))
    assert sel.normalised_entropy(torch.full((4,), 0.25)) == pytest.approx(1.0)
    assert sel.normalised_entropy(torch.tensor([1.0, 0.0, 0.0])) == 0.0


def test_dualprompt_pool_selection_hand_computed():
    # q = [1, 0]; keys [1, 1] and [0, -1]: cos = [0.707107, 0] -> key 0, matching loss 1 - 0.707107
    picked, pull = sel.pool_select(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0], [0.0, -1.0]]))
    assert picked.tolist() == [0]
    assert pull.item() == pytest.approx(0.292893, abs=1e-6)
