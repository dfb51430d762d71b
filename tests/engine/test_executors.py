"""The Ray backend: same numbers as the sequential one, any pool size (cohorts dealt whole to workers), fractional
resources, many clients."""

from __future__ import annotations

import sys
import time

import pytest
import ray
import torch

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.engine.executors import RayExecutor, balance
from raysim.engine.ray_session import PoolReservation, how_many, pool_size
from raysim.engine.setup import prepare_shards
from raysim.testing.smoke import FAST, TINY, open_simulation, prepared, run_rounds, smoke_layers


def config_for(backend, workers=0, **resources):
    """FAST in cohorts of 2 (5 clients a round: a worker of two gets a cohort of 1 beside two of 2)."""
    layers = [FAST, {"resources": {"backend": backend, "workers": workers, **resources}}]
    return build_config("fedvpt", [*layers, {"train": {"cohort": "on", "cohort_size": 2}}])


def metrics_of(config):
    """Every round's metrics; the run must have moved the global tensors (so equal metrics are not vacuous)."""
    initial, reports, final = run_rounds(config)
    assert any(not torch.equal(final.params[k], initial.params[k]) for k in initial.params)
    return [report.metrics for report in reports]


ACCURACY = ("global_acc", "local_acc", "worst_local_acc", "sigma_client", "train_loss")


@pytest.fixture(scope="module")
def sequential_run(ray_session):
    return metrics_of(config_for("sequential"))


@pytest.mark.parametrize("workers", [1, 2])
def test_ray_matches_sequential_for_any_pool_size(ray_session, sequential_run, workers):
    ray_run = metrics_of(config_for("ray", workers=workers, cpus_per_client=0.5))
    assert len(ray_run) == len(sequential_run) == 3
    for seq, par in zip(sequential_run, ray_run):
        for key in ACCURACY + ("bytes_up", "bytes_down"):
            assert par[key] == pytest.approx(seq[key], abs=1e-6), key


@pytest.mark.parametrize("method", ["sgpt", "fgpt"])
def test_workers_that_compute_with_the_options_placeholders_give_the_sequential_numbers(ray_session, method):
    """A Ray run's workers start before the first of them resolves the method's options on the backbone (SGPT's and
    FGPT's prompt and query blocks from its depth), so they compute with the placeholders: the same numbers
    (:class:`~raysim.core.protocol.ResolvesOptions`; q-FFL's and pFedHN's resolved values act on the coordinator
    only)."""
    small = {"federation": {"clients": 10, "participation": 0.3, "rounds": 2}}
    layers = [{k: v for k, v in FAST.items() if k != "fedvpt"}, *smoke_layers(method), small]
    given = build_config(method, [*layers, {"resources": {"backend": "sequential"}}])
    assert prepared(given)[0].options != given.options  # placeholders to resolve
    on_ray = build_config(method, [*layers, {"resources": {"backend": "ray", "workers": 1, "cpus_per_client": 0.5}}])
    for seq, par in zip(metrics_of(given), metrics_of(on_ray), strict=True):
        for key in ACCURACY:
            assert par[key] == pytest.approx(seq[key], abs=1e-6), key


MODEL_CODE = ("raysim.models", "timm", "torchvision", "torch._dynamo")


@pytest.mark.parametrize("method", ["fedvpt", "sgpt", "fedv"])
def test_the_coordinator_never_imports_the_model_code(ray_session, method):
    """The coordinator samples, aggregates and logs; the workers build the models (split learning's server its
    blocks). Without timm (and the torchvision and torch._dynamo it imports) it starts about 2 s sooner on 2 cores
    and holds about 110 MB less."""
    layers = [
        {k: v for k, v in FAST.items() if k != "fedvpt"},
        *smoke_layers(method),
        {"federation": {"rounds": 1}, "resources": {"backend": "ray", "workers": 1, "cpus_per_client": 0.5}},
    ]
    with open_simulation(build_config(method, layers)) as (coordinator, _, _):
        coordinator.run_round(1)
        probe = coordinator.handle.__ray_call__.remote(lambda _: [m for m in MODEL_CODE if m in sys.modules])
        assert ray.get(probe) == []


def test_workers_get_the_requested_fractional_resources_in_their_bundles(ray_session):
    config = config_for("ray", workers=2, cpus_per_client=0.5, gpus_per_client=0.5)
    config, _, shards = prepared(config)
    with PoolReservation(config) as reservation:
        pool = reservation.start(config, shards.info.num_classes)
        assigned = RayExecutor(config, shards, ray.put(shards), pool).resources()
    assert len(assigned) == 2
    for resources in assigned:
        assert resources["CPU"] == pytest.approx(0.5)
        assert resources["GPU"] == pytest.approx(0.5)


def test_thousand_clients_run_on_a_pool_of_two(ray_session):
    layers = [
        FAST,
        {
            "federation": {"clients": 1000, "rounds": 1, "participation": 0.004},
            "data": {"partition": "iid"},
            "resources": {"workers": 2, "cpus_per_client": 0.5},
        },
    ]
    config = build_config("fedvpt", layers)
    shards = prepare_shards(config)
    assert shards.num_clients == 1000
    (on_ray,) = run_rounds(config, shards)[1]
    alone = build_config("fedvpt", [*layers, {"resources": {"backend": "sequential"}}])
    (sequentially,) = run_rounds(alone, shards)[1]
    assert len(set(on_ray.sampled)) == 4 and on_ray.sampled == sequentially.sampled  # 0.4% of 1,000, dealt to 2
    assert {k: on_ray.metrics[k] for k in ACCURACY} == {k: sequentially.metrics[k] for k in ACCURACY}


def test_pool_that_does_not_fit_is_a_config_error(ray_session):
    config = config_for("ray", workers=3, cpus_per_client=1.0)
    with (
        pytest.raises(ConfigError, match="3 workers .* do not fit the Ray cluster's 2 CPU"),
        PoolReservation(config) as reservation,
    ):
        reservation.start(config, 10)


def test_a_pool_reserved_after_its_release_is_given_back_at_once(ray_session):
    """Ctrl-C releases the reservation on the caller's thread while the set-up thread may still be reserving."""
    config = config_for("ray", workers=2, cpus_per_client=0.5)
    reservation = PoolReservation(config)
    reservation.release()
    with pytest.raises(RuntimeError, match="released"):
        reservation.start(config, 10)
    assert [g["state"] for g in ray.util.placement_group_table().values()].count("CREATED") == 0


def test_workers_started_after_the_release_are_stopped(ray_session, monkeypatch):
    """Ctrl-C releases the reservation on the caller's thread while the set-up thread may be starting the workers:
    those it started after the release are stopped, and the start says why."""
    from raysim.engine import ray_session as ray_session_module

    config = config_for("ray", workers=1, cpus_per_client=0.5)
    reservation, started = PoolReservation(config), []
    start_workers = ray_session_module.start_workers

    def released_meanwhile(*args):
        started.append(start_workers(*args))
        reservation.release()  # finds no started pool: the group goes, the workers stay for start to stop
        return started[0]

    monkeypatch.setattr(ray_session_module, "start_workers", released_meanwhile)
    with pytest.raises(RuntimeError, match="released .* while its workers were starting"):
        reservation.start(config, 10)
    # a worker Ray had not yet placed when its group went is never scheduled: dead either way
    with pytest.raises((ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError)):
        ray.get(started[0].actors[0].ready.remote(), timeout=60)


def test_unseen_clients_never_train_and_are_reported(ray_session):
    config = build_config(
        "fedvpt",
        [FAST, {"federation": {"unseen_fraction": 0.2, "participation": 0.5}, "resources": {"backend": "sequential"}}],
    )
    with open_simulation(config) as (simulation, _, shards):
        assert len(shards.unseen) == 4 and config.federation.clients_per_round == 8
        reports = [simulation.run_round(r) for r in range(1, 4)]
    for report in reports:
        assert not set(report.sampled) & set(shards.unseen)
        rows = {c: len(shards.test(c).labels) for c in shards.unseen}  # the held-out clients' test rows, pooled
        pooled = sum(report.client_acc[c] * rows[c] for c in rows) / sum(rows.values())
        assert report.metrics["unseen_acc"] == pytest.approx(pooled, abs=1e-9)
    assert set(shards.unseen) <= set(reports[-1].client_acc)


def test_clients_are_dealt_to_workers_by_rows_not_by_count():
    # one big client (the single client of a rare domain under DIF 10) and many small ones
    chunks = balance([0, 1, 2, 3, 4, 5], [480, 48, 48, 48, 48, 48], 2)
    assert chunks == [[0], [1, 2, 3, 4, 5]]
    assert balance([7], [3], 4) == [[7]] and balance([], [], 2) == []
    assert sorted(c for chunk in balance(list(range(9)), [5, 1, 4, 2, 3, 3, 2, 4, 1], 3) for c in chunk) == list(
        range(9)
    )


def test_the_servers_math_sums_with_the_clients_threads_on_both_backends(ray_session):
    """pFedHN's server steps a hypernetwork: at two torch threads a client, a Ray coordinator (a process Ray starts
    with one thread) gives the sequential driver's numbers, to the last bit."""
    layers = [TINY, *smoke_layers("pfedhn"), {"federation": {"rounds": 1}}]
    runs = {}
    for backend, workers in (("sequential", 0), ("ray", 1)):
        resources = {"backend": backend, "workers": workers, "cpus_per_client": 0.5, "threads": 2}
        _, reports, final = run_rounds(build_config("pfedhn", [*layers, {"resources": resources}]))
        runs[backend] = ([{k: r.metrics[k] for k in ACCURACY if k in r.metrics} for r in reports], final)
    (sequential, on_sequential), (on_ray, final) = runs["sequential"], runs["ray"]
    assert on_ray == sequential
    for ours, theirs in ((final.params, on_sequential.params), (final.server, on_sequential.server)):
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs if isinstance(theirs[k], torch.Tensor))


@pytest.mark.parametrize(
    "available, each, fits",
    [(2.0, 0.4, 5), (1.0, 0.2, 5), (1.0, 0.1, 10), (2.0, 0.1, 20), (2.0, 0.3, 6), (1.5, 0.5, 3), (2.0, 3.0, 0)],
)
def test_a_pool_fills_the_cluster_with_as_many_workers_as_ray_can_place(available, each, fits):
    """Counted in Ray's units: in floats 2.0 // 0.4 is 4, one worker fewer than fit."""
    assert how_many(available, each) == fits


@pytest.mark.parametrize(
    "federation, workers",
    [
        ({}, 2),  # m = 2 clients a round
        ({"over_select": 1.0}, 4),  # 4 selected, the first 2 kept: all 4 train
        ({"mode": "async", "concurrency": 4}, 4),  # 4 in flight
    ],
)
def test_an_automatic_pool_holds_as_many_workers_as_clients_train_at_once(ray_session, federation, workers):
    """2 free CPUs hold four workers of 0.5 CPU; the pool takes as many as clients train at once, no more."""
    layers = [
        {"federation": {"clients": 20, "participation": 0.1, **federation}, "systems": {"speed": "lognormal:2,0.7"}},
        {"resources": {"backend": "ray", "cpus_per_client": 0.5}},
    ]
    deadline = time.monotonic() + 30  # an earlier test's workers give their CPUs back as Ray ends them
    while ray.available_resources().get("CPU") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 2.0  # nothing else holds the test session's CPUs
    assert pool_size(build_config("fedvpt", layers)) == workers
