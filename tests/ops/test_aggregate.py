import pytest
import torch

from raysim.ops.aggregate import normalised_weights, row_masked_mean, tensor_bytes, weighted_mean


def test_weighted_mean_matches_hand_computed_fedavg():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([[0.0]])}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([[4.0]])}
    out = weighted_mean([a, b], [1, 3])  # weights 1/4, 3/4
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert torch.allclose(out["b"], torch.tensor([[3.0]]))
    assert out["w"].dtype == torch.float32


def test_weighted_mean_does_not_depend_on_client_order():
    torch.manual_seed(0)
    updates = [{"w": torch.randn(50)} for _ in range(7)]
    weights = [3, 1, 4, 1, 5, 9, 2]
    forward = weighted_mean(updates, weights)["w"]
    backward = weighted_mean(updates[::-1], weights[::-1])["w"]
    assert torch.equal(forward, backward)


@pytest.mark.parametrize("weights", [[0, 0], [1, -1]])
def test_weights_must_be_nonnegative_with_positive_sum(weights):
    with pytest.raises(ValueError):
        normalised_weights(weights)


def test_tensor_bytes_counts_element_sizes():
    assert tensor_bytes({"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.float16)}) == 3 * 4 * 4 + 5 * 2


def test_row_masked_mean_averages_each_row_over_the_clients_that_trained_it():
    previous = {"p": torch.tensor([[9.0], [9.0], [9.0], [9.0]]), "h": torch.tensor([0.0, 0.0])}
    a = {"p": torch.tensor([[1.0], [2.0], [5.0], [7.0]]), "h": torch.tensor([1.0, 2.0])}
    b = {"p": torch.tensor([[3.0], [6.0], [8.0], [7.0]]), "h": torch.tensor([5.0, 6.0])}
    trained = [{"p": torch.tensor([True, True, False, False])}, {"p": torch.tensor([False, True, True, False])}]
    out = row_masked_mean([a, b], [1, 3], trained, previous)
    # row 0: a alone; row 1: (1 * 2 + 3 * 6) / 4 = 5; row 2: b alone; row 3: nobody, kept; h: both, (1 + 15) / 4
    assert out["p"].tolist() == [[1.0], [5.0], [8.0], [9.0]]
    assert out["h"].tolist() == [4.0, 5.0]
    assert out["p"].dtype == torch.float32
    whole = [{}, {}]
    assert torch.equal(row_masked_mean([a, b], [1, 3], whole, previous)["p"], weighted_mean([a, b], [1, 3])["p"])
