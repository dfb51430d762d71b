"""train.precision: which precision ``auto`` picks, where bf16 is refused, and that bf16 autocast really runs
client compute while everything communicated stays float32."""

from __future__ import annotations

import pytest
import torch

from raysim.config import build_config
from raysim.core.errors import ConfigError
from raysim.core.messages import Broadcast
from raysim.engine.client import ClientRuntime
from raysim.engine.precision import AUTO_ENV, autocast, native_bf16_cpu, resolve
from raysim.engine.setup import THREADS_ENV, resolved
from raysim.testing.smoke import prepared

QUICK = {
    "federation": {"clients": 8, "rounds": 1, "participation": 0.25, "seed": 1},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
}


@pytest.fixture(autouse=True)
def machine_defaults(monkeypatch):
    """These tests are about what auto means on a machine: the test matrix's overrides do not apply here."""
    monkeypatch.delenv(AUTO_ENV, raising=False)
    monkeypatch.delenv(THREADS_ENV, raising=False)


def never_asked() -> bool:
    raise AssertionError("the CPU was probed although the answer could not change the precision")


@pytest.mark.parametrize(
    "allows, on_gpu, native, expected",
    [
        (True, False, lambda: True, "bf16"),
        (True, False, lambda: False, "fp32"),
        (True, True, never_asked, "fp32"),
        (False, False, never_asked, "fp32"),
    ],
)
def test_auto_is_bf16_only_for_cpu_clients_with_native_bf16_and_a_tolerant_method(allows, on_gpu, native, expected):
    assert resolve("auto", method_allows=allows, on_gpu=on_gpu, native_cpu=native) == expected


@pytest.mark.parametrize("given", ["fp32", "bf16"])
def test_explicit_precision_is_kept(given):
    assert resolve(given, method_allows=True, on_gpu=True, native_cpu=never_asked) == given


def test_build_config_is_pure_and_the_driver_resolves_auto_on_this_machine(monkeypatch):
    monkeypatch.setattr("raysim.engine.precision.native_bf16_cpu", never_asked)
    assert build_config("sgpt", []).train.precision == "auto"  # no CPU probe while building a config
    monkeypatch.undo()
    expected = "bf16" if native_bf16_cpu() else "fp32"
    assert resolved(build_config("sgpt", [])).train.precision == expected
    assert resolved(build_config("fedvz", [])).train.precision == "fp32"  # SPSA needs float32 everywhere
    assert resolved(build_config("sgpt", [{"resources": {"gpus_per_client": 0.5}}])).train.precision == "fp32"
    assert resolved(build_config("sgpt", [{"train": {"precision": "fp32"}}])).train.precision == "fp32"


def test_the_environment_decides_auto_for_a_test_matrix(monkeypatch):
    monkeypatch.setenv(AUTO_ENV, "bf16")
    assert resolve("auto", method_allows=True, on_gpu=True, native_cpu=never_asked) == "bf16"
    assert resolve("auto", method_allows=False, on_gpu=False, native_cpu=never_asked) == "fp32"
    assert resolve("fp32", method_allows=True, on_gpu=False, native_cpu=never_asked) == "fp32"  # explicit wins
    monkeypatch.setenv(AUTO_ENV, "fp16")
    with pytest.raises(ConfigError, match="RAYSIM_PRECISION='fp16' must be fp32 or bf16"):
        resolve("auto", method_allows=True, on_gpu=False, native_cpu=never_asked)


def test_threads_are_resolved_and_recorded(monkeypatch):
    assert resolved(build_config("fedvpt", [{"resources": {"cpus_per_client": 2}}])).resources.threads == 2
    assert resolved(build_config("fedvpt", [{"resources": {"cpus_per_client": 0.5}}])).resources.threads == 1
    monkeypatch.setenv(THREADS_ENV, "2")
    assert resolved(build_config("fedvpt", [])).resources.threads == 2
    assert resolved(build_config("fedvpt", [{"resources": {"threads": 1}}])).resources.threads == 1  # explicit wins


@pytest.mark.parametrize("method", ["fedv", "fedvz", "festa"])
def test_bf16_is_refused_for_split_learning(method):
    with pytest.raises(ConfigError, match=rf"^{method} needs float32 client compute \(.+\); use train.precision=fp32"):
        build_config(method, [{"train": {"precision": "bf16"}}])


def test_unresolved_precision_is_a_programming_error():
    with pytest.raises(ValueError, match="was not resolved"):
        autocast(torch.device("cpu"), "auto")


def client_update(precision: str):
    config, initial, shards = prepared(build_config("sgpt", [QUICK, {"train": {"precision": precision}}]))
    runtime = ClientRuntime(config, shards.info.num_classes)
    (result,) = runtime.train(1, Broadcast(initial.params), [[(shards.seen_clients()[0], {}, None)]], shards)
    return initial, shards, result


def test_bf16_autocast_runs_the_client_and_what_it_sends_is_float32(ray_session):  # Ray Data reads the source
    initial, shards, fp32 = client_update("fp32")
    _, bf16_shards, bf16 = client_update("bf16")
    assert bf16_shards.features["query"].dtype == shards.features["query"].dtype
    assert not (bf16_shards.features["query"] == shards.features["query"]).all()  # queries computed in bf16
    for name, reference in initial.params.items():
        assert bf16.params[name].dtype == reference.dtype == torch.float32, name
    changed = [n for n in initial.params if not torch.equal(bf16.params[n], fp32.params[n])]
    assert changed  # the local steps ran in bf16 ...
    for name in changed:  # ... and stay close to float32's
        assert torch.allclose(bf16.params[name], fp32.params[name], atol=0.1), name


def test_bf16_tensors_leave_the_client_as_float32_and_others_unchanged():
    from raysim.engine.client import _to_cpu

    sent = _to_cpu(
        {
            "mean": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
            "counts": torch.tensor([3, 4]),
            "exact": torch.tensor([0.1], dtype=torch.float64),
        }
    )
    assert sent["mean"].dtype == torch.float32 and sent["mean"].tolist() == [1.5, -2.25]
    assert sent["counts"].dtype == torch.int64 and sent["exact"].dtype == torch.float64
