"""Checkpoint files: round trip, atomic writes, retention, and refusal of damaged or foreign folders."""

from __future__ import annotations

import json

import pytest
import torch

from raysim import checkpoint as ckpt
from raysim.errors import ConfigError
from raysim.method import GlobalState


def _checkpoint(round: int) -> ckpt.Checkpoint:
    state = GlobalState(params={"prompt": torch.full((2, 3), float(round)), "head.weight": torch.arange(6.0)},
                        server={"selection_total": torch.tensor([round, 1], dtype=torch.int64)})
    clients = {7: {"h_prev": torch.ones(4) * round}, 3: {"h_prev": torch.zeros(4), "z_prev": torch.eye(2)}}
    return ckpt.Checkpoint("run1", round, {"method": "fedvpt", "federation": {"rounds": 9}}, state, clients,
                           "sqlite:///x.db", history=[{"round": r, "global_acc": 10.0 * r} for r in range(1, round + 1)],
                           client_acc={3: 50.0}, records=[{"round": round, "clusters": {"3": 1}}])


def test_round_trip_keeps_every_tensor_dtype_and_order(tmp_path):
    saved = _checkpoint(4)
    folder = ckpt.save(tmp_path / "run1", saved, keep=2)
    assert folder.name == "round-000004"
    loaded = ckpt.load(tmp_path / "run1")
    assert (loaded.run_id, loaded.round, loaded.method, loaded.config) == ("run1", 4, "fedvpt", saved.config)
    assert list(loaded.state.params) == ["prompt", "head.weight"]  # saved order, not sorted
    for name, tensor in saved.state.params.items():
        assert torch.equal(loaded.state.params[name], tensor)
    assert loaded.state.server["selection_total"].dtype == torch.int64
    assert list(loaded.client_states) == [7, 3] and set(loaded.client_states[3]) == {"h_prev", "z_prev"}
    assert torch.equal(loaded.client_states[3]["z_prev"], torch.eye(2))
    assert loaded.history == saved.history and loaded.client_acc == {3: 50.0} and loaded.records == saved.records


def test_shared_storage_is_saved(tmp_path):
    """Views of one tensor (a method may return them) are cloned; safetensors refuses shared storage."""
    base = torch.arange(8.0)
    state = GlobalState(params={"a": base[:4], "b": base[4:]})
    ckpt.save(tmp_path, ckpt.Checkpoint("r", 1, {"method": "fedavg"}, state, {}, "u"), keep=0)
    assert torch.equal(ckpt.load(tmp_path).state.params["b"], torch.tensor([4.0, 5, 6, 7]))


def test_retention_keeps_the_newest_and_a_partial_write_is_ignored(tmp_path):
    for round in range(1, 6):
        ckpt.save(tmp_path, _checkpoint(round), keep=2)
    assert [p.name for p in ckpt.rounds_in(tmp_path)] == ["round-000004", "round-000005"]
    (tmp_path / ".partial-round-000006-1").mkdir()  # a crash mid-write leaves only this
    assert ckpt.load(tmp_path).round == 5
    for round in range(6, 9):
        ckpt.save(tmp_path, _checkpoint(round), keep=0)
    assert len(ckpt.rounds_in(tmp_path)) == 5
    assert ckpt.load(tmp_path / "round-000006").round == 6  # a round folder loads that round


def test_damaged_or_foreign_folders_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        ckpt.load(tmp_path)
    folder = ckpt.save(tmp_path / "run", _checkpoint(2), keep=0)
    (folder / ckpt.TENSORS).write_bytes((folder / ckpt.TENSORS).read_bytes()[:-1] + b"\x00")
    with pytest.raises(ConfigError, match="does not match the SHA-256"):
        ckpt.load(folder)
    (folder / ckpt.MANIFEST).write_text(json.dumps({"format": 99}))
    with pytest.raises(ConfigError, match="is not a raysim checkpoint manifest"):
        ckpt.load(folder)
    (folder / ckpt.MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="is not a raysim checkpoint manifest"):
        ckpt.load(folder)
