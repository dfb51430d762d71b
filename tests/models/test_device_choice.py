"""Where clients compute: on a GPU only when the run's clients take one, on every backend. No GPU runs the suite, so
CUDA's answer is given here; bench/methods_on_device.py and the GPU smoke run the real thing."""

from __future__ import annotations

import pytest
import torch

from raysim.config import build_config
from raysim.models.factory import pick_device


@pytest.mark.parametrize("gpus, cuda, expected", [(0.0, True, "cpu"), (0.5, True, "cuda"), (1.0, False, "cpu")])
def test_a_run_that_takes_no_gpu_computes_on_the_cpu_where_one_is_visible(monkeypatch, gpus, cuda, expected):
    """The sequential backend's process sees every GPU (Ray hides them from a worker that reserved none): without
    ``--gpus-per-client`` it must not train there, or the two backends compute on different devices."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    resources = build_config("fedavg", [{"resources": {"backend": "sequential", "gpus_per_client": gpus}}]).resources
    assert pick_device(resources.gpus_per_client).type == expected
