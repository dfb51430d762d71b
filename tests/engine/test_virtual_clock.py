"""The virtual clock in the round loop: the same systems decisions and numbers on every backend, exact resume with
the clock, each straggler policy's effect, a partial round's cut work, and runs without a clock left unchanged."""

from __future__ import annotations

import io
import itertools

import pytest
from rich.console import Console

from raysim.base.seeding import Purpose, derive_seed
from raysim.config import build_config
from raysim.core.messages import Broadcast
from raysim.core.protocol import ClientContext
from raysim.core.training import batch_plan, within_work
from raysim.engine.client import ClientRuntime
from raysim.engine.driver import run
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.smoke import FAST, prepared, run_rounds
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import resume

DEVICES = {"speed": "lognormal:2,0.7", "uplink": "2e4", "dropout": 0.2}
SYSTEMS_KEYS = ("sim_time_s", "round_sim_s", "stragglers", "dropouts", "participation_rate")


def clocked(policy="partial", backend="sequential", **resources):
    return build_config(
        "fedvpt",
        [
            FAST,
            {"systems": DEVICES, "federation": {"deadline_s": 6.0, "stragglers": policy, "over_select": 0.4}},
            {"resources": {"backend": backend, **resources}},
        ],
    )


def metrics(config):
    return [{k: v for k, v in r.metrics.items() if k not in TIMING_KEYS} for r in run_rounds(config)[1]]


@pytest.fixture(scope="module")
def runs(ray_session):
    return {policy: metrics(clocked(policy)) for policy in ("drop", "wait", "partial")}


def test_every_policy_logs_the_clock_and_meets_stragglers_and_dropouts(runs):
    for policy, rounds in runs.items():
        assert all(set(SYSTEMS_KEYS) <= set(r) for r in rounds), policy
        clock = [r["sim_time_s"] for r in rounds]
        assert clock == pytest.approx(list(itertools.accumulate(r["round_sim_s"] for r in rounds)))
        assert sum(r["stragglers"] for r in rounds) > 0 and sum(r["dropouts"] for r in rounds) > 0, policy
    # the same devices, draws and stragglers under every policy (the policy acts after them)
    assert [r["stragglers"] for r in runs["drop"]] == [r["stragglers"] for r in runs["wait"]]
    for drop, wait, cut in zip(runs["drop"], runs["wait"], runs["partial"]):
        if drop["stragglers"]:
            assert drop["round_sim_s"] <= 6.0 < wait["round_sim_s"] and cut["round_sim_s"] <= 6.0
            assert drop["participation_rate"] < wait["participation_rate"]
            assert cut["participation_rate"] >= drop["participation_rate"]


def test_ray_backend_matches_sequential_with_the_clock(ray_session, runs):
    on_ray = metrics(clocked("partial", "ray", workers=2, cpus_per_client=0.5))
    assert len(on_ray) == len(runs["partial"])
    for seq, par in zip(runs["partial"], on_ray):
        assert par.keys() == seq.keys()
        for key in seq:
            assert par[key] == pytest.approx(seq[key], abs=1e-6), key


def test_a_run_without_a_clock_has_no_systems_metrics(ray_session):
    plain = build_config("fedvpt", [FAST, {"resources": {"backend": "sequential"}, "federation": {"rounds": 1}}])
    assert not plain.clocked
    assert not set(SYSTEMS_KEYS) & set(metrics(plain)[0])


def test_a_partial_round_trains_the_first_steps_of_the_full_plan(ray_session):
    config = build_config("fedvpt", [FAST, {"resources": {"backend": "sequential"}, "train": {"batch_size": 4}}])
    config, initial, shards = prepared(config)
    runtime = ClientRuntime(config, shards.info.num_classes)
    client = shards.seen_clients()[0]
    rows = len(shards.train(client))
    full, cut = (
        runtime.train(1, Broadcast(initial.params), [[(client, {}, None, work)]], shards)[0] for work in (1.0, 0.5)
    )
    seed = derive_seed(config.federation.seed, Purpose.CLIENT, 1, client)
    plan = batch_plan(rows, 4, 1, ClientContext(1, client, seed, None, None, config).generator())
    expected = within_work(plan, 0.5)
    assert full.metrics["samples"] == rows and full.metrics["steps"] == len(plan[0])
    assert cut.metrics["steps"] == len(expected) < full.metrics["steps"]
    assert cut.metrics["samples"] == sum(len(r) for _, r in expected) <= rows // 2


def test_resume_continues_the_clock_exactly(ray_session, tracking_uri, tmp_path):
    """Round 3 replayed from the round-2 checkpoint: the same devices, tiers, draws, clock and numbers."""
    config = build_config(
        "fedvpt",
        [
            {
                "systems": {**DEVICES, "tiers": "head,all"},
                "federation": {"deadline_s": 6.0, "stragglers": "partial", "over_select": 0.4},
            },
            FAST,
            {"resources": {"backend": "sequential"}, "checkpoint": {"keep": 0, "dir": str(tmp_path / "ck")}},
            {"tracking": {"tracking_uri": tracking_uri}},
        ],
    )
    quiet = {"show_progress": False, "console": Console(file=io.StringIO())}
    full = run(config, **quiet)
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000002")
    resumed = run(resume.resumed_config(found, "fedvpt", []), resume=found, **quiet)

    def comparable(history):
        return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]

    assert comparable(resumed.history) == comparable(full.history)
    assert resumed.history[-1]["sim_time_s"] > resumed.history[1]["sim_time_s"] > 0
    assert sum(h["tiered_updates"] for h in resumed.history) > 0
