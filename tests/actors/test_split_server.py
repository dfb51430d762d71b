"""Split learning's server as a Ray actor: the in-process server's answers, several clients' requests served at
once, and a model its node cannot build refused in one line."""

from __future__ import annotations

import dataclasses

import pytest
import ray
import torch

from raysim.actors.proxy import unwrapped
from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core.protocol import split_encoder
from raysim.engine import driver
from raysim.engine.driver import end_coordinator, start_coordinator
from raysim.engine.executors import start_server
from raysim.engine.ray_session import Pool, PoolReservation, how_many
from raysim.engine.setup import resolved
from raysim.testing.smoke import prepared
from raysim.tracking.checkpoint import Checkpoint

TINY = {
    "federation": {"clients": 4, "rounds": 1, "seed": 3},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
}


def test_actor_answers_as_the_in_process_server_and_serves_clients_concurrently(ray_session):
    config = build_config("fedvz", [TINY])
    config, initial, shards = prepared(config)
    encoder, _ = split_encoder(initial.server)
    local = start_server(config, shards.info.num_classes, None)
    remote = start_server(config, shards.info.num_classes, Pool(2, None))
    local.load(encoder)
    remote.load(encoder)
    h = torch.randn(512, 17, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(remote.forward(None, h)[0], local.forward(None, h)[0])
    assert all(torch.equal(a, b) for a, b in zip(remote.perturbed(h, 5, 1e-3)[:2], local.perturbed(h, 5, 1e-3)[:2]))
    remote.end_round()
    # four clients' requests at once: one stored input (no request waits on its own upload) large enough that each
    # forward outlasts the others' dispatch by far, so that they overlap on a loaded machine too
    big = ray.put(torch.randn(4096, 17, 64, generator=torch.Generator().manual_seed(1)))
    ray.get([remote.handle.forward.remote(None, big) for _ in range(4)])
    compute_s, peak = remote.end_round()
    assert peak >= 2 and compute_s > 0
    ray.kill(remote.handle)


def test_a_model_the_servers_node_cannot_build_is_one_line_through_the_coordinator(ray_session, tmp_path):
    """The server builds its blocks where Ray places it, started by the coordinator in the run's set-up. A weights
    file it cannot read there (on a cluster: a file missing on that node only, after the first worker's set-up read
    it on its own) reaches the driver as the one-line ConfigError of that start, not as the server's and then the
    coordinator's deaths."""
    config, _, shards = prepared(build_config("fedv", [TINY]))
    bad = tmp_path / "weights.safetensors"
    bad.write_bytes(b"not safetensors")
    there = dataclasses.replace(config, model=dataclasses.replace(config.model, weights=str(bad)))
    coordinator = start_coordinator()
    try:
        with pytest.raises(ConfigError) as refused:
            unwrapped(coordinator.start_server.remote(there, shards.info.num_classes, Pool(2, None)))
    finally:
        end_coordinator(coordinator)
    assert type(refused.value) is ConfigError and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"weights file {bad} is not a readable safetensors file")


def test_the_set_up_builds_the_server_before_the_run_exists_and_the_run_uses_it(ray_session, tmp_path):
    """On Ray the coordinator starts split learning's server in the run's set-up, before the store and the run, so a
    model the server cannot build refuses the input with nothing written (above); the rounds use that server."""
    store = {"tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    pool = {"resources": {"backend": "ray", "workers": 1, "cpus_per_client": 0.5}}
    config = resolved(build_config("fedv", [TINY, store, pool]))
    with PoolReservation(config) as reservation:
        config, initial, _, shards, _, coordinator = driver._set_up(
            config, None, config.tracking.resolved_uri, reservation
        )
        try:
            early = ray.get(coordinator.__ray_call__.remote(lambda actor: actor._early_server.handle))
            start = Checkpoint("untracked", 0, config.to_dict(), initial, {}, "")
            pool = reservation.start(config, shards.info.num_classes)
            simulation = driver.make_simulation(config, shards, start, pool, coordinator=coordinator)
            used = ray.get(coordinator.__ray_call__.remote(lambda actor: actor.simulation.server.handle))
            assert used == early  # the same actor: no second server
            simulation.run_round(1)
        finally:
            end_coordinator(coordinator)


def test_the_servers_resources_are_reserved_with_the_workers(ray_session, tmp_path):
    """``resources.server_cpus`` is a bundle of the pool's placement group: a pool sized without ``--workers`` leaves
    the server its CPU (the server used to wait forever for a CPU the workers held), and a pool and server the cluster
    cannot hold are refused in one line before anything runs."""
    store = {"tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    sized = {"federation": {"participation": 1.0}, "resources": {"backend": "ray", "cpus_per_client": 0.5}}
    config = resolved(build_config("fedv", [TINY, store, sized, {"resources": {"server_cpus": 1.0}}]))
    free = ray.available_resources().get("CPU", 0.0)  # 2 CPUs, less what the module's earlier tests still hold
    with PoolReservation(config) as reservation:
        pool = reservation.start(config, 10)
        assert pool.workers == max(1, min(4, how_many(free - 1.0, 0.5)))  # the server's CPU is not the workers'
        assert pool.server_bundle == pool.workers  # the group's last bundle
        server = start_server(config, 10, pool)
        assert ray.get(
            server.handle.__ray_call__.remote(lambda actor: ray.get_runtime_context().get_placement_group_id())
        )
    too_many = resolved(
        build_config(
            "fedv",
            [TINY, store, {"resources": {"backend": "ray", "workers": 2, "cpus_per_client": 1.0, "server_cpus": 1.0}}],
        )
    )
    with pytest.raises(
        ConfigError, match=r"2 workers x .* and split learning's server \(server_cpus=1.0, server_gpus=0.0\) do not fit"
    ):
        PoolReservation(too_many).start(too_many, 10)
