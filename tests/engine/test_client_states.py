"""The clients' states: one arena per tensor name, copies out, in-place updates, changes tracked for checkpoints."""

from __future__ import annotations

import pytest
import torch

from raysim.engine.client_states import ClientStates


def test_states_round_trip_as_copies_and_changes_are_tracked():
    states = ClientStates({4: {"h": torch.ones(3), "z": torch.zeros(2, 2)}})
    assert list(states) == [4] and states.dirty == set()  # loaded from a checkpoint: nothing to write
    states.put(9, {"h": torch.full((3,), 2.0), "z": torch.eye(2)})
    out = states[9]
    assert list(out) == ["h", "z"] and torch.equal(out["z"], torch.eye(2))
    out["z"].add_(1)  # a copy: the stored state is untouched
    assert torch.equal(states[9]["z"], torch.eye(2))
    cleared, changed = states.take_changes()
    assert not cleared and list(changed) == [9]
    states.put(4, {"h": torch.full((3,), 5.0), "z": torch.ones(2, 2)})
    cleared, changed = states.take_changes()
    assert not cleared and list(changed) == [4] and torch.equal(changed[4]["h"], torch.full((3,), 5.0))
    states.clear()
    assert len(states) == 0 and states.take_changes() == (True, {})


def test_resized_states_are_appended_and_the_arena_compacts():
    states = ClientStates()
    for client in range(50):
        states.put(client, {"z": torch.full((client % 5 + 1, 4), float(client))})
    before = states.nbytes()
    for step in range(20):  # every client's state changes size many times
        for client in range(50):
            states.put(client, {"z": torch.full(((client + step) % 7 + 1, 4), float(step))})
    for client in range(50):
        assert torch.equal(states[client]["z"], torch.full(((client + 19) % 7 + 1, 4), 19.0))
    assert states.nbytes() <= 8 * max(before, 50 * 7 * 4 * 4)  # stale slices are reclaimed, not kept forever


def test_a_state_of_another_dtype_is_refused():
    states = ClientStates({0: {"h": torch.ones(2)}})
    with pytest.raises(ValueError, match="client 1's state is torch.float64 where other clients' is torch.float32"):
        states.put(1, {"h": torch.ones(2, dtype=torch.float64)})
