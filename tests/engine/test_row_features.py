"""The model's one build before the first round (the options resolved on it, the initial global state, the per-row
values a method caches: SGPT's query): in the process itself (sequential), or on the Ray backend by the pool's first
worker, so the driver imports no model code and keeps no CUDA context; no pass where nothing is cached."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.engine import driver, setup
from raysim.engine import model_setup as building
from raysim.engine import ray_session as ray_session_module
from raysim.engine.ray_session import PoolReservation
from raysim.testing import chaos
from raysim.testing.smoke import prepared

NANO = {
    "federation": {"clients": 8, "rounds": 1, "participation": 0.25, "seed": 3},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential", "threads": 1},
}
ON_GPUS = {"resources": {"backend": "ray", "gpus_per_client": 0.5}}  # the session's Ray declares 2 GPUs


def refuse(*args, **kwargs):
    raise AssertionError("the driver built the model")


@pytest.mark.parametrize("method", ["sgpt", "fedvpt"])
def test_on_ray_the_first_worker_builds_what_the_driver_would(method, ray_session, monkeypatch):
    """CPU workers: the options, the initial global state and the cached features equal the sequential build's."""
    here_config, here_initial, here = prepared(build_config(method, [NANO]))
    monkeypatch.setattr(building, "model_setup", refuse)  # this process's; the worker's process imports its own
    config = build_config(method, [NANO, {"resources": {"backend": "ray", "cpus_per_client": 0.5}}])
    with PoolReservation(config) as reservation:
        worker_config, worker_initial, in_worker = prepared(config, reservation=reservation)
    assert worker_config.options == here_config.options
    for part in ("params", "server"):
        ours, theirs = getattr(here_initial, part), getattr(worker_initial, part)
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), part
    assert here.features.keys() == in_worker.features.keys() == ({"query"} if method == "sgpt" else set())
    for name, values in here.features.items():
        np.testing.assert_array_equal(in_worker.features[name], values)


def count_builds(ray, worker) -> None:
    """From now on, the worker's process counts the models it builds (``builds`` on the worker)."""

    def install(runtime):
        from raysim.models import factory

        build, runtime.builds = factory.build_model, 0

        def counted(*args, **kwargs):
            runtime.builds += 1
            return build(*args, **kwargs)

        factory.build_model = counted

    ray.get(worker.__ray_call__.remote(install))


@pytest.mark.parametrize("method, builds", [("sgpt", 0), ("fedv", 1)])
def test_the_first_worker_sets_up_on_its_own_model_unless_it_is_split(method, builds, ray_session):
    """No second model in the first worker (a second copy of ViT-B on a shared GPU), but for split learning, whose
    worker gave the server's blocks up; the worker's model is back on its device after (the CPU here, a GPU there;
    that it trains as before: the Ray-against-sequential tests)."""
    config = build_config(method, [NANO, {"resources": {"backend": "ray", "cpus_per_client": 0.5}}])
    with PoolReservation(config) as reservation:
        first = reservation.start(setup.resolved(config), 10).actors[0]  # the set-up's pool, started before it
        count_builds(ray_session, first)
        prepared(config, reservation=reservation)
        assert ray_session.get(first.__ray_call__.remote(lambda runtime: runtime.builds)) == builds
        where = first.__ray_call__.remote(
            lambda worker: ({p.device for p in worker.runtime.model.parameters()}, worker.runtime.device)
        )
        placed, device = ray_session.get(where)
        assert placed == {device}


def test_a_bad_weights_file_is_one_line_from_the_first_worker_and_leaves_no_coordinator_and_no_store(
    ray_session, tmp_path
):
    """The first worker's build refuses the weights: the driver raises its ``ConfigError`` as itself, in one line.
    The coordinator's process, started while that worker built, ends too (held by the error's traceback, it would
    otherwise live as long as the error), and the store was never created."""
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"not safetensors")
    store = {"tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    config = build_config("fedvpt", [NANO, store, {"resources": {"backend": "ray"}, "model": {"weights": str(path)}}])
    before = set(chaos.actor_pids("Coordinator"))
    with pytest.raises(ConfigError) as refused:
        driver.run(config, show_progress=False)
    assert type(refused.value) is ConfigError and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"weights file {path} is not a readable safetensors file")
    deadline = time.monotonic() + 30
    while set(chaos.actor_pids("Coordinator")) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(chaos.actor_pids("Coordinator")) - before
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("method", ["sgpt", "fgpt"])
def test_with_clients_on_gpus_the_first_worker_computes_what_the_driver_would(method, ray_session, monkeypatch):
    _, _, on_driver = prepared(build_config(method, [NANO]))
    monkeypatch.setattr(building, "model_setup", refuse)  # this process's; the worker's process imports its own
    config = build_config(method, [NANO, ON_GPUS])
    with PoolReservation(config) as reservation:
        _, _, in_worker = prepared(config, reservation=reservation)
        # the set-up reserved the pool (2 workers x 0.5 GPU: the round's clients) and started its workers in it, the
        # first of which built the model
        workers = reservation.start(config, 10).actors  # the pool the set-up started, as it is
        assigned = ray_session.get([worker.assigned_resources.remote() for worker in workers])
        assert [(r["GPU"], r["CPU"]) for r in assigned] == [(0.5, 1.0), (0.5, 1.0)]
    assert on_driver.features.keys() == in_worker.features.keys() == {"query"}
    assert len(in_worker.features["query"]) == len(in_worker.images)
    np.testing.assert_array_equal(in_worker.features["query"], on_driver.features["query"])


@pytest.mark.parametrize(
    "resources, refused",
    [  # the session's Ray declares 2 CPUs and 2 GPUs: Ray would wait for ever for more
        (
            {"gpus_per_client": 3},
            r"^1 worker x \(cpus_per_client=1.0, gpus_per_client=3.0\) does not fit the Ray cluster's 2 CPU, 2 GPU; "
            r"lower --cpus-per-client/--gpus-per-client$",
        ),
        (
            {"gpus_per_client": 0.5, "cpus_per_client": 0.25, "workers": 5},
            r"^5 workers x \(cpus_per_client=0.25, gpus_per_client=0.5\) do not fit .*; lower --workers or the",
        ),
    ],
)
def test_a_pool_the_cluster_could_never_hold_is_refused_before_the_build(resources, refused, ray_session, monkeypatch):
    monkeypatch.setattr(ray_session_module, "start_workers", refuse)  # reaching the workers fails the test at once
    config = build_config("sgpt", [NANO, {"resources": {"backend": "ray", **resources}}])
    with pytest.raises(ConfigError, match=refused), PoolReservation(config) as reservation:
        prepared(config, reservation=reservation)


def test_sgpt_with_shared_prompts_only_caches_nothing_and_runs_no_pass(monkeypatch):
    monkeypatch.setattr(building, "features_here", refuse)
    _, _, shards = prepared(build_config("sgpt", [NANO, {"sgpt": {"prompts": "shared"}}]))
    assert shards.features == {}


def test_inside_a_trials_placement_group_the_first_worker_builds_in_its_bundle(ray_session):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from raysim.sweep.tune import bundles

    config = build_config("sgpt", [NANO, ON_GPUS])
    trial = placement_group(bundles(config))  # as Tune reserves a trial: its own bundle, then one per worker
    ray_session.get(trial.ready())

    def trials_driver():  # nested, so it travels by value (the test module does not import in Ray's workers)
        with PoolReservation(config) as reservation:
            return prepared(config, reservation=reservation)[2].features["query"]

    try:
        in_trial = ray_session.remote(num_cpus=1)(trials_driver).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(trial, 0, placement_group_capture_child_tasks=True)
        )
        queries = ray_session.get(in_trial.remote(), timeout=120)  # the group holds every CPU
    finally:
        remove_placement_group(trial)
    np.testing.assert_array_equal(queries, prepared(build_config("sgpt", [NANO]))[2].features["query"])
