"""Compressed broadcasts by hand: the public model the encoded updates build, the residual the next update carries,
each client's download since its last one, and an update moved onto the server's model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core.messages import Broadcast, ClientUpdate
from raysim.core.registry import METHODS, get_method
from raysim.engine.downlink import Downlink


def downlink(codec="topk:0.5", saved=None):
    config = build_config("fedvpt", [{"compression": {"downlink": codec}}])
    return Downlink(config, {"w": torch.tensor([1.0, 1.0, 1.0, 1.0])}, clients=3, saved=saved or {})


def test_the_public_model_follows_the_encoded_updates_and_the_residual_goes_out_next():
    link = downlink()
    link.advance(1, {"w": torch.tensor([4.0, 1.0, 0.0, 1.5])})  # change (3, 0, -1, 0.5): top-2 sends 3 and -1
    assert link.public["w"].tolist() == [4.0, 1.0, 0.0, 1.0] and link.sent == [0.0, 16.0]  # 2 x (index, value)
    link.advance(2, {"w": torch.tensor([4.0, 1.0, 0.0, 1.5])})  # the server did not move: the residual 0.5 goes
    assert link.public["w"].tolist() == [4.0, 1.0, 0.0, 1.5] and link.version == 2


def test_a_client_downloads_the_updates_since_its_last_download_or_the_whole_model():
    link = downlink()
    first = link.broadcast(Broadcast({"w": torch.zeros(4)}, {"e": torch.zeros(2)}), [0])
    assert first.params["w"].tolist() == [1.0] * 4  # the public model, not the server's
    assert first.downloads == {0: 16} and first.bytes_to(0) == 16 + 8  # the whole model, and the extras
    link.advance(1, {"w": torch.tensor([4.0, 1.0, 0.0, 1.5])})
    link.advance(2, {"w": torch.tensor([9.0, 1.0, 0.0, 1.5])})
    second = link.broadcast(Broadcast({"w": torch.zeros(4)}), [0, 1])
    assert second.downloads == {0: 16, 1: 16}  # two updates of 8 + 8 bytes each, or the whole model: 16 either way
    link.advance(3, {"w": torch.tensor([9.0, 2.0, 0.0, 1.5])})
    third = link.broadcast(Broadcast({"w": torch.zeros(4)}), [0, 2])
    assert third.downloads == {0: 16, 2: 16} and link.sent[3] == 16.0
    assert np.array_equal(link.synced, [3, 2, 3])
    assert link.broadcast(Broadcast({"w": torch.zeros(4)}), [2]).downloads == {2: 0}  # it has the latest


def test_a_download_is_the_sum_of_the_missed_updates_when_that_is_smaller():
    link = downlink("topk:0.25")
    link.broadcast(Broadcast({"w": torch.zeros(4)}), [0])
    link.advance(1, {"w": torch.tensor([2.0, 1.0, 1.0, 1.0])})
    assert link.broadcast(Broadcast({"w": torch.zeros(4)}), [0]).downloads == {0: 8}  # one (index, value) pair


def test_an_update_is_moved_onto_the_server_model_and_the_ledger_survives_a_checkpoint():
    link = downlink()
    link.broadcast(Broadcast({"w": torch.zeros(4)}), [1])
    link.advance(1, {"w": torch.tensor([4.0, 1.0, 0.0, 1.5])})  # public (4, 1, 0, 1), the server's (4, 1, 0, 1.5)
    update = ClientUpdate(1, 3, {"w": torch.tensor([5.0, 1.0, 0.0, 1.0]), "own": torch.ones(1)})
    moved = link.moved({"w": torch.tensor([4.0, 1.0, 0.0, 1.5])}, update)
    assert moved.params["w"].tolist() == [5.0, 1.0, 0.0, 1.5] and moved.params["own"].tolist() == [1.0]
    again = downlink(saved=link.saved())
    assert again.public["w"].tolist() == link.public["w"].tolist() and again.sent == link.sent
    assert np.array_equal(again.synced, link.synced)


@pytest.mark.parametrize("method", list(METHODS))
def test_a_method_that_sends_each_client_its_own_tensors_refuses_a_compressed_broadcast(method):
    """pFedHN's and pFedPG's clients train from tensors made for them alone (Broadcast.instructions): the shared public
    model of compression.downlink would move them by the server's leftover error, which no client received."""
    layer = {"compression": {"downlink": "topk:0.5"}}
    if get_method(method).split_learning or get_method(method).cls.set_once:
        return  # refused for its activations (tests/engine/test_uplink.py), or a tensor set once (test_baselines.py)
    if get_method(method).cls.own_broadcast:
        with pytest.raises(ConfigError, match=rf"^{method} sends each client tensors of its own \("):
            build_config(method, [layer])
    else:
        assert build_config(method, [layer]).compression.downlink == "topk:0.5"
    assert {m for m in METHODS if get_method(m).cls.own_broadcast} == {"pfedhn", "pfedpg"}
