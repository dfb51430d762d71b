"""Checkpoint files: round trip, incremental client states, atomic writes, retention, and refusal of damaged or
foreign folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from raysim.base.errors import ConfigError
from raysim.core.messages import GlobalState
from raysim.tracking import checkpoint as ckpt


def _checkpoint(round: int) -> ckpt.Checkpoint:
    state = GlobalState(
        params={"prompt": torch.full((2, 3), float(round)), "head.weight": torch.arange(6.0)},
        server={"selection_total": torch.tensor([round, 1], dtype=torch.int64)},
    )
    clients = {7: {"h_prev": torch.ones(4) * round}, 3: {"h_prev": torch.zeros(4), "z_prev": torch.eye(2)}}
    return ckpt.Checkpoint(
        "run1",
        round,
        {"method": "fedvpt", "federation": {"rounds": 9}},
        state,
        clients,
        "sqlite:///x.db",
        history=[{"round": r, "global_acc": 10.0 * r} for r in range(1, round + 1)],
        client_acc={3: 50.0},
        records=[{"round": round, "clusters": {"3": 1}}],
        contributions={7: round, 3: 1},
    )


def test_round_trip_keeps_every_tensor_dtype_and_order(tmp_path):
    saved = _checkpoint(4)
    folder = ckpt.save(tmp_path / "run1", saved)
    assert folder.name == "round-000004"
    loaded = ckpt.load(tmp_path / "run1")
    assert (loaded.run_id, loaded.round, loaded.method, loaded.config) == ("run1", 4, "fedvpt", saved.config)
    assert list(loaded.state.params) == ["prompt", "head.weight"]  # saved order, not sorted
    for name, tensor in saved.state.params.items():
        assert torch.equal(loaded.state.params[name], tensor)
    assert loaded.state.server["selection_total"].dtype == torch.int64
    assert list(loaded.client_states) == [3, 7] and set(loaded.client_states[3]) == {"h_prev", "z_prev"}
    assert torch.equal(loaded.client_states[3]["z_prev"], torch.eye(2))
    assert loaded.history == saved.history and loaded.client_acc == {3: 50.0} and loaded.records == saved.records
    assert loaded.contributions == {3: 1, 7: 4}


def test_a_manifest_without_contributions_loads_as_not_counted(tmp_path):
    """A checkpoint that does not record which clients were heard loads with ``contributions`` None, so a run
    resumed from it logs no participation record rather than one missing the rounds before it."""
    folder = ckpt.save(tmp_path / "run1", _checkpoint(2))
    manifest = json.loads((folder / ckpt.MANIFEST).read_text())
    del manifest["contributions"]
    (folder / ckpt.MANIFEST).write_text(json.dumps(manifest))
    assert ckpt.load(tmp_path / "run1").contributions is None


def test_shared_storage_is_saved(tmp_path):
    """Views of one tensor (a method may return them) are cloned; safetensors refuses shared storage."""
    base = torch.arange(8.0)
    state = GlobalState(params={"a": base[:4], "b": base[4:]})
    ckpt.save(tmp_path, ckpt.Checkpoint("r", 1, {"method": "fedavg"}, state, {}, "u"))
    assert torch.equal(ckpt.load(tmp_path).state.params["b"], torch.tensor([4.0, 5, 6, 7]))


def test_retention_keeps_the_newest_and_a_partial_write_is_ignored(tmp_path):
    for round in range(1, 6):
        ckpt.save(tmp_path, _checkpoint(round))
        ckpt.prune(tmp_path, keep=2, confirmed=round)
    assert [p.name for p in ckpt.rounds_in(tmp_path)] == ["round-000004", "round-000005"]
    (tmp_path / ".partial-round-000006-1").mkdir()  # a crash mid-write leaves only this
    (tmp_path / "clients" / ".partial-round-000006.safetensors-1").write_bytes(b"cut short")
    assert ckpt.load(tmp_path).round == 5
    for round in range(6, 9):
        ckpt.save(tmp_path, _checkpoint(round))
        ckpt.prune(tmp_path, keep=0, confirmed=round)
    assert len(ckpt.rounds_in(tmp_path)) == 5
    assert ckpt.load(tmp_path / "round-000006").round == 6  # a round folder loads that round
    assert not list(tmp_path.rglob(".partial-*"))  # round 6 written again: what the crash left is gone


def test_the_checkpoint_a_recovery_needs_outlives_the_next_one_until_its_report_arrives(tmp_path):
    """With ``keep=1`` the checkpoint of round 2 stays while round 3's is written but unreported (the coordinator may
    die before the report reaches the driver, which then recovers from round 2); pruning for round 2 drops round 3's
    (that round is replayed and logged), pruning for round 3 drops round 2's."""
    first, second = _checkpoint(2), _checkpoint(3)
    ckpt.save(tmp_path, first)
    ckpt.prune(tmp_path, keep=1, confirmed=2)
    second.client_states = {7: {"h_prev": torch.full((4,), 9.0)}}
    ckpt.save(tmp_path, second, client_files=first.client_files)
    assert [p.name for p in ckpt.rounds_in(tmp_path)] == ["round-000002", "round-000003"]
    assert ckpt.load(tmp_path / "round-000002").round == 2
    ckpt.prune(tmp_path, keep=1, confirmed=2)  # round 3's report never came: the driver goes back to round 2
    assert [p.name for p in ckpt.rounds_in(tmp_path)] == ["round-000002"]
    assert sorted(p.name for p in (tmp_path / ckpt.CLIENTS).iterdir()) == ["round-000002.safetensors"]
    ckpt.save(tmp_path, second, client_files=first.client_files)  # round 3 replayed, and this time reported
    ckpt.prune(tmp_path, keep=1, confirmed=3)
    assert [p.name for p in ckpt.rounds_in(tmp_path)] == ["round-000003"]
    assert torch.equal(ckpt.load(tmp_path).client_states[3]["z_prev"], torch.eye(2))  # round 2's file, still used


def test_a_replayed_round_replaces_its_checkpoint_whole_even_when_the_process_stops_midway(tmp_path, monkeypatch):
    ckpt.save(tmp_path, _checkpoint(1))
    replayed = _checkpoint(1)
    replayed.history = [{"round": 1, "global_acc": 42.0}]
    ckpt.save(tmp_path, replayed)
    assert [p.name for p in tmp_path.glob("round-*")] == ["round-000001"]
    assert ckpt.load(tmp_path).history == [{"round": 1, "global_acc": 42.0}]
    renames, real = [], ckpt.os.replace

    def stops_before_the_new_one_is_in(source, target):  # the old one moved aside, then the process dies
        renames.append(target)
        if len(renames) == 2:
            raise OSError("killed")
        real(source, target)

    monkeypatch.setattr(ckpt.os, "replace", stops_before_the_new_one_is_in)
    other = _checkpoint(1)  # a replay that did not compute alike (a GPU's nondeterminism): other client states
    other.client_states[7]["h_prev"] = torch.full((4,), 9.0)
    with pytest.raises(OSError):
        ckpt.save(tmp_path, other)
    monkeypatch.undo()
    kept = ckpt.load(tmp_path)  # the one it was replacing, whole: its client states' file too
    assert kept.history == [{"round": 1, "global_acc": 42.0}] and torch.equal(
        kept.client_states[7]["h_prev"], torch.ones(4)
    )
    ckpt.save(tmp_path, _checkpoint(2))  # the next round's checkpoint, once reported, prunes it
    ckpt.prune(tmp_path, keep=1, confirmed=2)
    assert [p.name for p in tmp_path.glob("round-*")] == ["round-000002"]


def test_damaged_or_foreign_folders_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        ckpt.load(tmp_path)
    folder = ckpt.save(tmp_path / "run", _checkpoint(2))
    (folder / ckpt.TENSORS).write_bytes((folder / ckpt.TENSORS).read_bytes()[:-1] + b"\x00")
    with pytest.raises(ConfigError, match="does not match the SHA-256"):
        ckpt.load(folder)
    (folder / ckpt.MANIFEST).write_text(json.dumps({"format": 99}))
    with pytest.raises(ConfigError, match="is not a raysim checkpoint manifest"):
        ckpt.load(folder)
    (folder / ckpt.MANIFEST).write_text(json.dumps({"format": ckpt.FORMAT, "config": {}}))  # no sha256, order, ...
    with pytest.raises(ConfigError, match="is not a raysim checkpoint manifest"):
        ckpt.load(folder)
    (folder / ckpt.MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="is not a raysim checkpoint manifest"):
        ckpt.load(folder)


def test_client_states_are_written_only_when_they_changed(tmp_path):
    """Each checkpoint writes the states changed since the last one; its manifest maps every client to the file
    with its latest state, and files no kept checkpoint refers to are removed."""
    first = _checkpoint(1)
    ckpt.save(tmp_path, first)
    assert first.client_files == {3: "round-000001.safetensors", 7: "round-000001.safetensors"}
    second = _checkpoint(2)
    second.client_states = {7: {"h_prev": torch.full((4,), 9.0)}}  # only client 7 trained since
    ckpt.save(tmp_path, second, client_files=first.client_files)
    assert second.client_files == {3: "round-000001.safetensors", 7: "round-000002.safetensors"}
    loaded = ckpt.load(tmp_path)
    assert torch.equal(loaded.client_states[7]["h_prev"], torch.full((4,), 9.0))
    assert torch.equal(loaded.client_states[3]["z_prev"], torch.eye(2))  # from round 1's file
    assert ckpt.load(tmp_path, clients=False).client_states == {} and loaded.client_files == second.client_files
    third = _checkpoint(3)
    third.client_states = {3: {"h_prev": torch.ones(4), "z_prev": torch.zeros(2, 2)}}
    ckpt.save(tmp_path, third, client_files=second.client_files)
    ckpt.prune(tmp_path, keep=1, confirmed=3)
    assert sorted(p.name for p in (tmp_path / ckpt.CLIENTS).iterdir()) == [
        "round-000002.safetensors",
        "round-000003.safetensors",
    ]
    cleared = _checkpoint(4)
    cleared.client_states = {}
    ckpt.save(tmp_path, cleared, client_files={})  # every client started over (FedV's fedround)
    ckpt.prune(tmp_path, keep=1, confirmed=4)
    assert ckpt.load(tmp_path).client_states == {} and not list((tmp_path / ckpt.CLIENTS).iterdir())


def test_a_client_that_kept_an_empty_state_keeps_it_through_a_checkpoint(tmp_path):
    """An empty state writes no tensor, and still marks the client as one that kept a state (error feedback of a
    tier that trained none of its rows, say)."""
    saved = _checkpoint(1)
    saved.client_states = {0: {"x": torch.ones(2)}, 5: {}}
    ckpt.save(tmp_path, saved)
    loaded = ckpt.load(tmp_path)
    assert sorted(loaded.client_states) == [0, 5] and loaded.client_states[5] == {}
    assert torch.equal(loaded.client_states[0]["x"], torch.ones(2))


def test_a_damaged_client_file_is_a_one_line_error(tmp_path):
    ckpt.save(tmp_path, _checkpoint(1))
    path = tmp_path / ckpt.CLIENTS / "round-000001.safetensors"
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(ConfigError, match="round-000001.safetensors is missing or does not match the SHA-256"):
        ckpt.load(tmp_path)


def _rewritten(path, content: bytes, manifest_path, key: str, name: str | None = None) -> None:
    """``path`` replaced by ``content``, its SHA-256 in the manifest updated to match (what the hash cannot catch)."""
    path.write_bytes(content)
    manifest = json.loads(manifest_path.read_text())
    if name is None:
        manifest[key] = ckpt._sha256(path)
    else:
        manifest[key][name] = ckpt._sha256(path)
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("tensors", [True, False], ids=["tensors", "manifest only"])
def test_files_that_match_their_hash_but_not_their_manifest_are_one_line_errors(tmp_path, tensors):
    """A Ray run's driver reads only manifests (``tensors=False``): it still refuses, from the safetensors header,
    a state or client file that is not safetensors or lacks what the manifest names, before a run is reopened."""
    folder = ckpt.save(tmp_path / "run", _checkpoint(2))
    state, manifest = folder / ckpt.TENSORS, folder / ckpt.MANIFEST
    good = state.read_bytes()
    _rewritten(state, b"not a tensor file", manifest, "sha256")
    with pytest.raises(ConfigError, match=r"state.safetensors is not a readable safetensors file \(.+\); resume"):
        ckpt.load(folder, tensors=tensors)
    save_file({"params/prompt": torch.zeros(2, 3)}, str(state))
    _rewritten(state, state.read_bytes(), manifest, "sha256")
    with pytest.raises(ConfigError, match=r"lacks 2 tensor\(s\) its manifest names \(params/head.weight, server/"):
        ckpt.load(folder, tensors=tensors)
    _rewritten(state, good, manifest, "sha256")
    clients = tmp_path / "run" / ckpt.CLIENTS / "round-000002.safetensors"
    _rewritten(clients, b"\x08" + bytes(7) + b"{}", manifest, "client_sha256", clients.name)  # a header, cut short
    with pytest.raises(ConfigError, match=r"round-000002.safetensors is not a readable safetensors file"):
        ckpt.load(folder, tensors=tensors)
    assert ckpt.load(folder, clients=False, tensors=tensors).round == 2  # the end of a run reads no client file


def test_a_format_1_checkpoint_still_loads(tmp_path):
    """Written before client states were incremental: every client's state inside state.safetensors."""
    folder = tmp_path / "round-000002"
    folder.mkdir()
    tensors = {"params/p": torch.ones(2), "server/v": torch.zeros(1), "client/4/h": torch.full((3,), 2.0)}
    save_file(tensors, str(folder / ckpt.TENSORS))
    manifest = {
        "format": 1,
        "run_id": "old",
        "method": "fedvpt",
        "round": 2,
        "config": {"method": "fedvpt"},
        "tracking_uri": "u",
        "sha256": ckpt._sha256(folder / ckpt.TENSORS),
        "order": list(tensors),
        "history": [],
        "records": [],
        "client_acc": {},
    }
    (folder / ckpt.MANIFEST).write_text(json.dumps(manifest))
    loaded = ckpt.load(tmp_path)
    assert list(loaded.state.params) == ["p"] and list(loaded.state.server) == ["v"]
    assert torch.equal(loaded.client_states[4]["h"], torch.full((3,), 2.0))


def test_a_client_state_file_is_hashed_once_however_many_checkpoints_refer_to_it(tmp_path, monkeypatch):
    hashed = []
    real = ckpt._sha256
    monkeypatch.setattr(ckpt, "_sha256", lambda path: hashed.append(Path(path).name) or real(path))
    files = None
    for round in range(1, 5):  # every round one client's state changes: one new file each
        checkpoint = _checkpoint(round)
        checkpoint.client_states = {7: checkpoint.client_states[7]} if files else checkpoint.client_states
        ckpt.save(tmp_path, checkpoint, client_files=files)
        files = checkpoint.client_files
    assert sorted(name for name in hashed if name.startswith("round-")) == [
        f"round-00000{r}.safetensors" for r in range(1, 5)
    ]
    assert ckpt.load(tmp_path).client_states[3]["z_prev"].equal(torch.eye(2))  # the files still check
