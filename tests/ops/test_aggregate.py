import pytest
import torch

from raysim.ops.aggregate import normalised_weights, tensor_bytes, weighted_mean


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
