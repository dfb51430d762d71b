"""Asynchronous mode (federation.mode=async): the staleness functions and the buffered step by hand, a FedBuff
schedule on a fixed clock by hand, the same numbers on Ray as in one process, exact resume from a checkpoint with
clients in flight, and one-line errors."""

from __future__ import annotations

import dataclasses
import io
import logging

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from raysim.base.errors import BadUpdateError, ConfigError
from raysim.cli import main
from raysim.config import build_config
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.registry import get_method
from raysim.engine.buffered_step import Arrival, buffered_step
from raysim.engine.driver import run
from raysim.engine.setup import prepare_shards
from raysim.ops.metrics import TIMING_KEYS
from raysim.ops.staleness import parse_staleness
from raysim.systems.profiles import Profiles
from raysim.testing.smoke import FAST, run_rounds
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import resume

ASYNC = {
    "federation": {"mode": "async", "concurrency": 4, "buffer": 2, "rounds": 4},
    "systems": {"speed": "lognormal:2,0.7"},
}


def numbers(history):
    return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]


def test_staleness_functions_by_hand():
    assert parse_staleness("constant")(7) == 1.0
    assert parse_staleness("polynomial:0.5")(3) == pytest.approx(0.5)  # (1 + 3)^-0.5
    assert parse_staleness("polynomial:1")(0) == 1.0
    hinge = parse_staleness("hinge:10,4")
    assert hinge(4) == 1.0 and hinge(5) == pytest.approx(1 / 11) and hinge(6) == pytest.approx(1 / 21)
    for bad in ("poly:1", "polynomial", "hinge:1", "polynomial:-1", "constant:2"):
        with pytest.raises(ValueError):
            parse_staleness(bad)


class Mean:
    """A sample-weighted mean, as FedAvg's server step."""

    def aggregate(self, round, state, updates):
        total = sum(u.num_samples for u in updates)
        params = {k: sum(u.params[k] * (u.num_samples / total) for u in updates) for k in state.params}
        return GlobalState(params, {"steps": state.server["steps"] + 1})


def fed(**overrides):
    return build_config(
        "fedvpt", [{"federation": {"mode": "async", "concurrency": 2, **overrides}, "systems": {"speed": "1"}}]
    ).federation


def test_fedbuff_moves_each_delta_onto_the_current_model_weighted_by_its_staleness():
    state = GlobalState({"w": torch.tensor([10.0, 10.0])}, {"steps": torch.tensor(0)})
    arrivals = [
        Arrival(ClientUpdate(0, 1, {"w": torch.tensor([3.0, 5.0])}), {"w": torch.tensor([1.0, 1.0])}, 0),  # delta 2, 4
        Arrival(ClientUpdate(1, 3, {"w": torch.tensor([4.0, 0.0])}), {"w": torch.tensor([0.0, 0.0])}, 3),  # delta 4, 0
    ]
    step = buffered_step(Mean(), 5, state, arrivals, fed(buffer=2, server_lr=0.5), parse_staleness("polynomial:0.5"))
    # moved: x + s * delta = (12, 14) with s(0) = 1 and (12, 10) with s(3) = 1/2; mean 1/4, 3/4: (12, 11);
    # server: x + 0.5 (mean - x) = (11, 10.5)
    assert step.params["w"].tolist() == pytest.approx([11.0, 10.5])
    assert int(step.server["steps"]) == 1


def test_fedasync_mixes_the_arrived_model_with_alpha_times_its_staleness_weight():
    """Xie et al.'s staleness t - tau counts the version the update lands in: tau + 1 here (5 versions passed since
    the download: 6; none: 1)."""
    state = GlobalState({"w": torch.tensor([10.0])}, {"steps": torch.tensor(0)})
    arrival = Arrival(ClientUpdate(0, 5, {"w": torch.tensor([2.0])}), {"w": torch.tensor([0.0])}, 5)
    step = buffered_step(Mean(), 2, state, [arrival], fed(buffer=1, async_alpha=0.5), parse_staleness("hinge:1,4"))
    # a = 0.5 * s(6) = 0.5 / (1 * (6 - 4) + 1) = 1/6; x = 5/6 * 10 + 1/6 * 2
    assert step.params["w"].tolist() == pytest.approx([52 / 6])
    fresh = dataclasses.replace(arrival, staleness=0)
    step = buffered_step(Mean(), 2, state, [fresh], fed(buffer=1, async_alpha=0.5), parse_staleness("polynomial:0.5"))
    rate = 0.5 * 2**-0.5  # a = 0.5 * (1 + 1)^-0.5
    assert step.params["w"].tolist() == pytest.approx([(1 - rate) * 10 + rate * 2])


def test_fedasync_under_a_compressed_broadcast_mixes_the_model_the_client_would_have_trained_from_the_servers():
    state = GlobalState({"w": torch.tensor([10.0])}, {"steps": torch.tensor(0)})
    # downloaded at x = 8 as the public model 0 (the broadcasts lag); trained to 1: its delta is 1
    arrival = Arrival(
        ClientUpdate(0, 5, {"w": torch.tensor([1.0])}), {"w": torch.tensor([0.0])}, 1, {"w": torch.tensor([8.0])}
    )
    step = buffered_step(Mean(), 2, state, [arrival], fed(buffer=1, async_alpha=0.5), parse_staleness("constant"))
    assert step.params["w"].tolist() == pytest.approx([9.5])  # 0.5 * 10 + 0.5 * (8 + 1); mixing x_i = 1 gave 5.5


def test_a_fedbuff_schedule_on_a_fixed_clock(tmp_path):
    """Three clients whose local work takes 1, 4 and 2 virtual seconds, all in flight, two updates a version.
    t=1: client 0 arrives and trains again (from version 0) until t=2, where it precedes client 2 (ties by client
    id): version 1 at t=2 is client 0 twice. Client 2 (from version 0: tau 1) arrives at t=2 and trains again from
    version 1; client 0, sent off at t=2 with version 1, is back at t=3 (tau 0): version 2. At t=4 client 0 (from
    version 2, tau 0) arrives and leaves again with version 2, then client 1 (from version 0: tau 2): version 3.
    Then client 2 (t=4, from version 1: tau 2) and client 0 (t=5, from version 2: tau 1): version 4."""
    base = [FAST, {"federation": {"clients": 3, "participation": 1.0, "rounds": 4, "eval_every": 4}}]
    sizes = prepare_shards(build_config("fedvpt", base)).train_sizes()
    trace = tmp_path / "devices.csv"
    durations = {0: 1, 1: 4, 2: 2}
    trace.write_text("client,speed\n" + "".join(f"{c},{sizes[c] / d}\n" for c, d in durations.items()))
    layers = [*base, {"federation": {"mode": "async", "concurrency": 3, "buffer": 2}, "systems": {"trace": str(trace)}}]
    reports = run_rounds(build_config("fedvpt", [*layers, {"resources": {"backend": "sequential"}}]))[1]
    assert [r.metrics["sim_time_s"] for r in reports] == [2.0, 3.0, 4.0, 5.0]
    assert [r.sampled for r in reports] == [[0, 0], [0, 2], [0, 1], [0, 2]]
    assert [r.metrics["staleness_mean"] for r in reports] == [0.0, 0.5, 1.0, 1.5]
    assert [r.metrics["staleness_max"] for r in reports] == [0.0, 1.0, 2.0, 2.0]
    assert all(r.metrics["updates_applied"] == 2.0 for r in reports)


def test_a_slot_left_free_is_taken_when_a_client_comes_online(tmp_path):
    """Two slots, two clients: client 0 is always online and trains for 100 s; client 1 comes online at 10 s and
    trains for 5 s. One update a version: client 1's at 15 s, then its next at 20 s, not after client 0's at 100 s."""
    base = [FAST, {"federation": {"clients": 2, "participation": 1.0, "rounds": 2, "eval_every": 2}}]
    sizes = prepare_shards(build_config("fedvpt", base)).train_sizes()
    trace = tmp_path / "devices.csv"
    trace.write_text(f"client,speed,period_s,online\n0,{sizes[0] / 100},,\n1,{sizes[1] / 5},1000,10-1000\n")
    async_mode = {"federation": {"mode": "async", "concurrency": 2, "buffer": 1}, "systems": {"trace": str(trace)}}
    reports = run_rounds(build_config("fedvpt", [*base, async_mode, {"resources": {"backend": "sequential"}}]))[1]
    assert [r.metrics["sim_time_s"] for r in reports] == [15.0, 20.0]
    assert [r.sampled for r in reports] == [[1], [1]]


def test_every_rejected_arrival_counts_also_a_clients_repeats_within_a_version(tmp_path, monkeypatch):
    """The clock of the fixed-clock test, client 0 sending NaN: it arrives, and is rejected, at t = 1, 2, 3 and 4
    (ties by client id); clients 2 (t = 2) and 1 (t = 4) fill the buffer. Four updates rejected, not one client."""
    cls = get_method("fedvpt").cls
    honest = cls.client_update

    def client_update(self, ctx, broadcast, client_state, data):
        update = honest(self, ctx, broadcast, client_state, data)
        if ctx.client_id == 0:
            update.params["prompts.shallow"] = torch.full_like(update.params["prompts.shallow"], float("nan"))
        return update

    monkeypatch.setattr(cls, "client_update", client_update)
    base = [FAST, {"federation": {"clients": 3, "participation": 1.0, "rounds": 1, "eval_every": 1}}]
    sizes = prepare_shards(build_config("fedvpt", base)).train_sizes()
    trace = tmp_path / "devices.csv"
    trace.write_text("client,speed\n" + "".join(f"{c},{sizes[c] / d}\n" for c, d in {0: 1, 1: 4, 2: 2}.items()))
    layers = [*base, {"federation": {"mode": "async", "concurrency": 3, "buffer": 2}, "systems": {"trace": str(trace)}}]
    (report,) = run_rounds(build_config("fedvpt", [*layers, {"resources": {"backend": "sequential"}}]))[1]
    assert report.sampled == [1, 2] and report.metrics["sim_time_s"] == 4.0
    assert report.metrics["rejected_updates"] == 4.0


def test_the_clock_waits_for_a_client_it_could_dispatch_not_for_a_held_out_one(tmp_path, monkeypatch):
    """The trainable clients are online 0-3 s of every 100,000 s, a held-out client every second: when no trainable
    client is online the clock jumps to the next time one is (as a synchronous round's does), asking only about
    the clients it could dispatch."""
    asked = []
    ask = Profiles.next_online

    def next_online(self, now, clients=None):
        asked.append(clients)
        return ask(self, now, clients)

    monkeypatch.setattr(Profiles, "next_online", next_online)
    base = [FAST, {"federation": {"clients": 4, "participation": 0.5, "unseen_fraction": 0.25, "rounds": 7}}]
    shards = prepare_shards(build_config("fedvpt", base))
    seen, sizes = sorted(shards.seen_clients()), shards.train_sizes()
    rows = [f"{c},{sizes[c]},100000,0-3" for c in seen] + [f"{c},1,1,0-0.5" for c in shards.unseen]
    trace = tmp_path / "devices.csv"
    trace.write_text("client,speed,period_s,online\n" + "\n".join(rows) + "\n")
    layers = [*base, {"federation": {"mode": "async", "concurrency": 2, "buffer": 1, "eval_every": 7}}]
    config = build_config(
        "fedvpt", [*layers, {"systems": {"trace": str(trace)}, "resources": {"backend": "sequential"}}]
    )
    reports = run_rounds(config)[1]
    assert [r.metrics["sim_time_s"] for r in reports] == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 100001.0]
    assert asked and all(clients is not None and list(clients) == seen for clients in asked)


def test_ray_backend_matches_sequential_in_async_mode(ray_session):
    def metrics(backend, **resources):
        config = build_config("fedvpt", [FAST, ASYNC, {"resources": {"backend": backend, **resources}}])
        return [{k: v for k, v in r.metrics.items() if k not in TIMING_KEYS} for r in run_rounds(config)[1]]

    sequential, on_ray = metrics("sequential"), metrics("ray", workers=2, cpus_per_client=0.5)
    assert [m["staleness_max"] for m in sequential][-1] > 0  # updates did land stale
    for seq, par in zip(sequential, on_ray, strict=True):
        assert par.keys() == seq.keys()
        for key in seq:
            assert par[key] == pytest.approx(seq[key], abs=1e-6), key


@pytest.mark.parametrize("buffer", [2, 1])  # FedBuff; FedAsync, whose checkpoint also keeps the model at download
def test_resume_with_clients_in_flight_and_compression_both_ways_is_exact(tracking_uri, tmp_path, buffer):
    config = build_config(
        "fedvpt",
        [
            FAST,
            ASYNC,
            {"federation": {"buffer": buffer, "rounds": 8 // buffer}},  # 8 updates either way
            {
                "systems": {"dropout": 0.2},
                "compression": {"uplink": "qsgd:4", "error_feedback": True, "downlink": "topk:0.3"},
            },
            {"resources": {"backend": "sequential"}, "checkpoint": {"keep": 0, "dir": str(tmp_path / "ck")}},
            {"tracking": {"tracking_uri": tracking_uri}},
        ],
    )
    quiet = {"show_progress": False, "console": Console(file=io.StringIO())}
    full = run(config, **quiet)
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000002")
    assert len(found.state.server["async/inflight"]) > 0  # the checkpoint holds clients in flight
    resumed = run(resume.resumed_config(found, "fedvpt", []), resume=found, **quiet)
    assert numbers(resumed.history) == numbers(full.history)
    assert sum(h["dropouts"] for h in full.history) > 0


def test_resume_with_a_client_whose_upload_outlasts_its_device_is_exact(tracking_uri, tmp_path):
    """Client 0's work ends at 1 s, but its upload would end after its device goes offline at 10 s: it fails then.
    Clients 1 and 2 take 2 and 3 s a time; version 1 (one update a version) is client 1's at 2 s, and its checkpoint
    holds client 0 failed in flight, which a resumed run must take at 10 s (version 8), as the uninterrupted one
    does, not at 1 s, before the checkpoint."""
    base = [FAST, {"federation": {"clients": 3, "participation": 1.0, "rounds": 8, "eval_every": 8}}]
    sizes = prepare_shards(build_config("fedvpt", base)).train_sizes()
    trace = tmp_path / "devices.csv"
    trace.write_text(
        f"client,speed,uplink,period_s,online\n0,{sizes[0]},1,1000,0-10\n1,{sizes[1] / 2},,,\n2,{sizes[2] / 3},,,\n"
    )
    config = build_config(
        "fedvpt",
        [
            *base,
            {"federation": {"mode": "async", "concurrency": 3, "buffer": 1}, "systems": {"trace": str(trace)}},
            {"resources": {"backend": "sequential"}, "checkpoint": {"keep": 0, "dir": str(tmp_path / "ck")}},
            {"tracking": {"tracking_uri": tracking_uri}},
        ],
    )
    quiet = {"show_progress": False, "console": Console(file=io.StringIO())}
    full = run(config, **quiet)
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000001")
    assert found.state.server["async/inflight"][:, 1].tolist().count(0) == 1  # client 0 in flight
    resumed = run(resume.resumed_config(found, "fedvpt", []), resume=found, **quiet)
    assert [h["sim_time_s"] for h in full.history] == [2.0, 3.0, 4.0, 6.0, 6.0, 8.0, 9.0, 10.0]
    assert [h["dropouts"] for h in full.history] == [0.0] * 7 + [1.0]
    assert numbers(resumed.history) == numbers(full.history)


@pytest.mark.parametrize(
    ("method", "sets", "says"),
    [
        ("fedgcr", ["federation.mode=async", "systems.speed=1"], "fedgcr cannot run federation.mode=async"),
        ("fedv", ["federation.mode=async", "systems.speed=1"], "fedv cannot run federation.mode=async"),
        ("fedvpt", ["federation.mode=async"], "give them devices"),
        (
            "fedvpt",
            ["federation.mode=async", "systems.speed=1", "federation.buffer=5", "federation.concurrency=2"],
            "buffer=5 is more than",
        ),
        ("fedvpt", ["federation.buffer=2"], "federation.buffer is set but does nothing without federation.mode=async"),
        (
            "fedvpt",
            ["federation.mode=async", "systems.speed=1", "federation.staleness=poly:1"],
            "federation.staleness='poly:1'",
        ),
    ],
)
def test_bad_async_settings_are_one_line_errors(tmp_path, method, sets, says):
    args = ["run", method, "--clients", "6", "--tracking-uri", f"sqlite:///{tmp_path}/none.db"]
    result = CliRunner().invoke(main, [*args, *[a for s in sets for a in ("--set", s)]])
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "none.db").exists()


def test_devices_that_never_finish_stop_the_run_in_one_line(tmp_path):
    trace = tmp_path / "short.csv"
    trace.write_text("client,speed,period_s,online\n0,1,100,0-1\n")  # online 1 s of 100, a client's work takes longer
    config = build_config(
        "fedvpt", [FAST, ASYNC, {"systems": {"trace": str(trace)}, "resources": {"backend": "sequential"}}]
    )
    with pytest.raises(ConfigError, match="1000 clients in a row went offline or dropped out before finishing"):
        run_rounds(config)


def test_a_tracked_run_stopped_in_its_first_round_leaves_no_checkpoint_folder(tmp_path, caplog):
    """The run holds its checkpoint folder from its start; stopped before any checkpoint, it removes it."""
    tracked = {
        "tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
        "checkpoint": {"dir": str(tmp_path)},
    }
    diverging = {"train": {"lr": 1e20}, "resources": {"backend": "sequential"}}
    config = build_config("fedvpt", [FAST, ASYNC, diverging, tracked])
    with caplog.at_level(logging.ERROR, logger="raysim"), pytest.raises(BadUpdateError):
        run(config, show_progress=False, console=Console(file=io.StringIO()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts", "mlflow.db", "mlflow.db.lock"]


def test_a_run_whose_updates_are_all_rejected_stops_in_one_line(caplog):
    """No server version fills its buffer when every update is rejected (a diverged run): it stops, not spins."""
    config = build_config("fedvpt", [FAST, ASYNC, {"train": {"lr": 1e20}, "resources": {"backend": "sequential"}}])
    with caplog.at_level(logging.ERROR, logger="raysim"), pytest.raises(BadUpdateError) as stopped:
        run_rounds(config)  # (the hundred warnings are not the point here)
    said = str(stopped.value)
    assert said.startswith("server version 1: the last 100 updates were all rejected, the last of client ")
    assert said.endswith("; the run diverged or its clients send malformed updates (lower train.lr, say)")
    assert "\n" not in said
