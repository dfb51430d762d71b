"""train.precision: which precision ``auto`` picks, where bf16 is refused, and that bf16 autocast really runs
client compute while everything communicated stays float32."""

from __future__ import annotations

import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.base.precision import _NATIVE_BF16_PROBES, AUTO_ENV, autocast, native_bf16_cpu, resolve
from raysim.config import build_config
from raysim.core.messages import Broadcast
from raysim.engine.client import ClientRuntime
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


@pytest.mark.parametrize("allows", [True, False])
def test_auto_is_fp32_and_explicit_precision_is_kept(allows):
    assert resolve("auto", method_allows=allows) == "fp32"
    assert resolve("fp32", method_allows=allows) == "fp32"
    assert resolve("bf16", method_allows=True) == "bf16"


def test_the_cpu_s_native_bf16_is_read_as_torch_detects_it():
    """The hint in a run's header reads the CPU's flags without torch (a Ray run's driver has none): the same answer
    as torch's probes, on whichever CPU runs the suite (AVX2 only: no; AVX-512 BF16 or AMX: yes)."""
    assert native_bf16_cpu() == any(getattr(torch.cpu, probe, lambda: False)() for probe in _NATIVE_BF16_PROBES)


def test_the_driver_resolves_auto_to_fp32():
    assert build_config("sgpt", []).train.precision == "auto"  # resolved by the driver, not while building
    assert resolved(build_config("sgpt", [])).train.precision == "fp32"
    assert resolved(build_config("sgpt", [{"train": {"precision": "bf16"}}])).train.precision == "bf16"


def test_the_environment_decides_auto_for_a_test_matrix(monkeypatch):
    monkeypatch.setenv(AUTO_ENV, "bf16")
    assert resolve("auto", method_allows=True) == "bf16"
    assert resolve("auto", method_allows=False) == "fp32"  # SPSA and split learning keep float32
    assert resolve("fp32", method_allows=True) == "fp32"  # explicit wins
    assert resolved(build_config("fedvz", [])).train.precision == "fp32"
    monkeypatch.setenv(AUTO_ENV, "fp16")
    with pytest.raises(ConfigError, match="RAYSIM_PRECISION='fp16' must be fp32 or bf16"):
        resolve("auto", method_allows=True)


def test_bf16_autocast_sees_each_step_s_weights():
    """Local training is one autocast region of many steps: a cached bf16 copy of a trainable weight would keep
    the first step's values (autocast's cast cache did: bf16 runs lost up to 40 points)."""
    layer = torch.nn.Linear(4, 3)
    x = torch.ones(2, 4)
    with autocast(torch.device("cpu"), "bf16"):
        before = layer(x)
        with torch.no_grad():
            layer.weight.add_(1.0)  # what an optimiser step does
        after = layer(x)
    assert before.dtype == torch.bfloat16
    assert torch.allclose(after.float() - before.float(), torch.full((2, 3), 4.0), atol=0.05)


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


def test_fp32_on_a_gpu_runs_convolutions_in_ieee_float32_not_tf32():
    """cuDNN's default for float32 convolutions is TF32 (10 mantissa bits); the flag is a process setting that the
    CPU build holds too, so the context is checked here, not the GPU's arithmetic."""
    cudnn = torch.backends.cudnn
    assert cudnn.allow_tf32  # torch's default, which the context overrides
    with autocast(torch.device("cuda"), "fp32"):
        assert not cudnn.allow_tf32 and cudnn.conv.fp32_precision != "tf32"
    assert cudnn.allow_tf32
    with autocast(torch.device("cpu"), "fp32"):
        assert cudnn.allow_tf32


def test_unresolved_precision_is_a_programming_error():
    with pytest.raises(ValueError, match="was not resolved"):
        autocast(torch.device("cpu"), "auto")


def client_update(precision: str):
    config, initial, shards = prepared(build_config("sgpt", [QUICK, {"train": {"precision": precision}}]))
    runtime = ClientRuntime(config, shards.info.num_classes)
    (result,) = runtime.train(1, Broadcast(initial.params), [[(shards.seen_clients()[0], {}, None)]], shards)
    return initial, shards, result


def test_bf16_autocast_runs_the_client_and_what_it_sends_is_float32():
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
