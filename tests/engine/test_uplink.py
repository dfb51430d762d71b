"""Compressed uplinks in the round loop: error feedback's residual over two rounds by hand, the bytes a run reports
from the encodings, exact resume with residuals, and one-line errors."""

from __future__ import annotations

import io
import math

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from raysim.cli import main
from raysim.config import build_config
from raysim.core.messages import Broadcast, ClientUpdate
from raysim.core.registry import get_method
from raysim.engine.driver import run
from raysim.engine.uplink import RESIDUAL, Uplink, own_state
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.console import own_lines
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import resume

SMALL = {
    "federation": {"clients": 20, "rounds": 3, "participation": 0.25, "eval_every": 3, "seed": 2},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
    "fedvpt": {"prompt_length": 2},
}


def fedvpt_uplink(settings: dict) -> Uplink:
    config = build_config("fedvpt", [settings])
    return Uplink(config, get_method("fedvpt").cls(config))


def test_top_k_with_error_feedback_sends_what_the_last_round_left_out():
    uplink = fedvpt_uplink({"compression": {"uplink": "topk:0.25", "error_feedback": True}})
    received = Broadcast({"w": torch.tensor([1.0, 1.0, 1.0, 1.0])})
    first = uplink.send(1, received, ClientUpdate(7, 10, {"w": torch.tensor([4.0, 0.0, 1.5, 3.0])}), None)
    # delta (3, -1, 0.5, 2): top-1 keeps 3; the residual is the rest
    assert first.params["w"].tolist() == [4.0, 1.0, 1.0, 1.0] and first.sent == 4 + 4
    state = uplink.state_to_keep(7, None, None)
    assert state[RESIDUAL + "w"].tolist() == [0.0, -1.0, 0.5, 2.0] and own_state(state) is None
    second = uplink.send(2, received, ClientUpdate(7, 10, {"w": torch.tensor([1.0, 1.0, 1.0, 2.0])}), state)
    # delta (0, 0, 0, 1) + residual = (0, -1, 0.5, 3): top-1 keeps 3
    assert second.params["w"].tolist() == [1.0, 1.0, 1.0, 4.0]
    kept = uplink.state_to_keep(7, {"personal": torch.ones(1)}, state)
    assert kept[RESIDUAL + "w"].tolist() == [0.0, -1.0, 0.5, 0.0] and own_state(kept) == {"personal": torch.ones(1)}


def test_a_tier_sends_only_the_rows_it_trained():
    uplink = fedvpt_uplink({"compression": {"uplink": "topk:1"}})
    update = ClientUpdate(
        0, 5, {"w": torch.tensor([[2.0, 2.0], [5.0, 5.0]])}, trained={"w": torch.tensor([True, False])}
    )
    sent = uplink.send(1, Broadcast({"w": torch.full((2, 2), 5.0)}), update, None)
    assert sent.params["w"].tolist() == [[2.0, 2.0], [5.0, 5.0]] and sent.sent == 2 * 4 + 2 * 4


@pytest.mark.parametrize("codec", ["randk:0.5", "topk:0.5", "qsgd:4"])
def test_a_tier_that_trained_none_of_a_tensors_rows_sends_none_of_it_and_keeps_its_residual(codec):
    uplink = fedvpt_uplink({"compression": {"uplink": codec, "error_feedback": True}})
    update = ClientUpdate(
        0, 5, {"w": torch.full((2, 2), 5.0), "b": torch.tensor([3.0])}, trained={"w": torch.tensor([False, False])}
    )
    earlier = {RESIDUAL + "w": torch.tensor([0.5, 0.5, 0.5, 0.5])}
    sent = uplink.send(1, Broadcast({"w": torch.full((2, 2), 5.0), "b": torch.tensor([1.0])}), update, earlier)
    assert uplink.state_to_keep(0, None, earlier)[RESIDUAL + "w"].tolist() == [0.5, 0.5, 0.5, 0.5]
    alone = uplink.send(1, Broadcast({"b": torch.tensor([1.0])}), ClientUpdate(0, 5, {"b": torch.tensor([3.0])}), None)
    assert sent.params["w"].tolist() == [[5.0, 5.0], [5.0, 5.0]] and sent.sent == alone.sent > 0  # b's bytes only


def test_error_feedback_keeps_the_key_rows_of_groups_a_client_did_not_choose_for_a_round_where_they_count():
    config = build_config("sgpt", [{"compression": {"uplink": "topk:0.5", "error_feedback": True}}])
    uplink = Uplink(config, get_method("sgpt").cls(config))
    keys, counts = "extra.selection_keys", {"selection_counts": torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)}
    update = ClientUpdate(3, 10, {keys: torch.tensor([[4.0, 1.0], [0.5, 0.5], [0.0, -3.0]])}, counts)
    earlier = {RESIDUAL + keys: torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0])}
    sent = uplink.send(1, Broadcast({keys: torch.zeros(3, 2)}), update, earlier)
    # rows 0 and 2 go out, (4, 1, 0, -3): top-2 keeps 4 and -3; group 1's row stays home, change and residual
    assert sent.params[keys].tolist() == [[4.0, 0.0], [0.0, 0.0], [0.0, -3.0]] and sent.sent == 2 * (4 + 4)
    kept = uplink.state_to_keep(3, None, earlier)[RESIDUAL + keys]
    assert kept.tolist() == [0.0, 1.0, 1.5, 1.5, 0.0, 0.0]


def test_a_tiers_residual_kept_by_an_older_raysim_for_its_trained_rows_only_goes_back_to_those_rows():
    uplink = fedvpt_uplink({"compression": {"uplink": "topk:1", "error_feedback": True}})
    rows = {"w": torch.tensor([False, True])}
    update = ClientUpdate(0, 5, {"w": torch.tensor([[5.0, 5.0], [5.0, 5.0]])}, trained=rows)
    older = {RESIDUAL + "w": torch.tensor([1.0, -1.0])}  # the trained row's, alone
    sent = uplink.send(1, Broadcast({"w": torch.full((2, 2), 5.0)}), update, older)
    assert sent.params["w"].tolist() == [[5.0, 5.0], [6.0, 4.0]]  # row 1's residual (1, -1), row 0 not sent


def test_an_update_that_is_not_finite_goes_unencoded_for_screening_to_reject_and_leaves_no_residual():
    from raysim.engine.screening import screen

    uplink = fedvpt_uplink({"compression": {"uplink": "topk:0.5", "error_feedback": True}})
    received = Broadcast({"w": torch.zeros(4)})
    update = ClientUpdate(3, 1, {"w": torch.tensor([float("nan"), 3.0, -2.0, 0.1])})
    sent = uplink.send(1, received, update, None)  # top-k would send (0, 3, -2, 0) and keep the NaN
    assert math.isnan(sent.params["w"][0]) and sent.bytes_up == 16
    assert list(screen([sent], received.params)[1]) == [3] and uplink.state_to_keep(3, None, None) is None


def test_a_tiers_update_sent_unencoded_counts_the_rows_it_trained_as_without_compression():
    uplink = fedvpt_uplink({"compression": {"uplink": "topk:1"}})
    w = torch.zeros(100, 10)
    w[0, 0] = float("nan")
    update = ClientUpdate(0, 5, {"w": w}, trained={"w": torch.arange(100) < 1})  # one row of 100 trained
    assert uplink.send(1, Broadcast({"w": torch.zeros(100, 10)}), update, None).bytes_up == 10 * 4


@pytest.mark.parametrize(
    ("params", "trained", "why"),
    [
        ({"w": torch.ones(3)}, {}, "params w: expected shape (4,), got shape (3,)"),
        ({"w": torch.ones(4, 1)}, {}, "params w: expected shape (4,), got shape (4, 1)"),
        ({"w": torch.ones(4)}, {"w": torch.tensor([True, False])}, "trained w: expected a boolean mask of 4 rows"),
    ],
)
def test_a_malformed_update_goes_unencoded_for_screening_to_reject_by_name(params, trained, why):
    """A shape the client did not receive (or a mask that is not one boolean per row) fails an encoding; sent as it
    is, screening rejects the client with its reason, as without compression."""
    from raysim.engine.screening import screen

    uplink = fedvpt_uplink({"compression": {"uplink": "qsgd:8", "error_feedback": True}})
    received = Broadcast({"w": torch.zeros(4)})
    sent = uplink.send(1, received, ClientUpdate(3, 1, params, trained=trained), None)
    assert sent.params is params and uplink.state_to_keep(3, None, None) is None
    assert why in screen([sent], received.params)[1][3]


def quiet_run(config, **kwargs):
    return run(config, show_progress=False, console=Console(file=io.StringIO()), **kwargs)


def test_a_run_reports_the_encoded_bytes_and_resumes_exactly_with_residuals_and_a_public_model(tracking_uri, tmp_path):
    layers = [
        SMALL,
        {"compression": {"uplink": "qsgd:4", "error_feedback": True, "downlink": "qsgd:8"}},
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck"), "keep": 0}},
    ]
    config = build_config("fedvpt", layers)
    full = quiet_run(config)
    plain = quiet_run(build_config("fedvpt", [SMALL, layers[2]]))
    sizes = [math.prod(t.shape) for t in ckpt.load(tmp_path / "ck" / full.run_id).state.params.values()]
    per_client = sum(4 + math.ceil(d / 8) + math.ceil(4 * d / 8) for d in sizes)  # norm, signs, 4-bit levels
    for compressed, raw in zip(full.history, plain.history, strict=True):
        assert compressed["bytes_up"] == 5 * per_client and raw["bytes_up"] == 5 * 4 * sum(sizes)
        assert compressed["bytes_down"] <= raw["bytes_down"]
    assert full.history[0]["bytes_down"] == plain.history[0]["bytes_down"] == 5 * 4 * sum(sizes)  # whole models
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000002")
    assert any(RESIDUAL in name for state in found.client_states.values() for name in state)
    resumed = quiet_run(resume.resumed_config(found, "fedvpt", []), resume=found)

    def numbers(history):
        return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]

    assert numbers(resumed.history) == numbers(full.history)


@pytest.mark.parametrize(
    "method, settings, fragment",
    [
        ("fedvpt", ["compression.uplink=qsgd:17"], "compression.uplink='qsgd:17': qsgd takes whole bits in 1..16"),
        ("fedvpt", ["compression.uplink=topk:0"], "topk takes the fraction kept, in (0, 1]"),
        ("fedvpt", ["compression.error_feedback=true"], "needs a compression.uplink other than none"),
        ("fedvpt", ["compression.downlink=randk:2"], "compression.downlink='randk:2': randk takes the fraction kept"),
        ("fedvz", ["compression.uplink=qsgd:8"], "fedvz is split learning"),
    ],
)
def test_bad_compression_input_is_one_line_exit_2(tmp_path, method, settings, fragment):
    args = [part for setting in settings for part in ("--set", setting)]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(main, ["run", method, "--preset", "quick", "--tracking-uri", uri, *args])
    lines = own_lines(result.stderr)
    assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], result.stderr
    assert not (tmp_path / "mlflow.db").exists()
