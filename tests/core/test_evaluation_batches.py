"""An evaluation forwards :func:`raysim.core.training.evaluation_batch` rows at a time: every row once, in order, and
the same per-row hits whatever the batch."""

import numpy as np
import torch

from raysim.config import build_config, load_preset
from raysim.core import training
from raysim.core.registry import get_method
from raysim.core.training import batched_rows, correct_per_row, evaluation_batch
from raysim.data.shards import ClientData
from raysim.models.factory import build_model

CPU = torch.device("cpu")


def test_a_cpu_evaluates_64_rows_at_a_time_and_an_accelerator_256():
    assert evaluation_batch(CPU) == 64
    assert evaluation_batch(torch.device("cuda")) == 256  # a device object only: nothing runs on it
    batches = list(batched_rows(200, 64))
    assert [len(b) for b in batches] == [64, 64, 64, 8]
    np.testing.assert_array_equal(np.concatenate(batches), np.arange(200))
    assert list(batched_rows(0, 64)) == []


def test_evaluation_does_not_depend_on_the_batch(monkeypatch):
    config = build_config("fedvpt", [load_preset("quick")])
    method = get_method("fedvpt").cls(config)
    torch.manual_seed(0)
    model = build_model(config, method, 10).eval()
    rng = np.random.default_rng(0)
    data = ClientData(rng.integers(0, 256, (150, 16, 16, 3), dtype=np.uint8), rng.integers(0, 10, 150), np.zeros(150))

    def hits(batch: int) -> np.ndarray:
        monkeypatch.setattr(training, "CPU_EVALUATION_BATCH", batch)
        return correct_per_row(model, data, CPU, lambda x, rows: method.predict(model, x, data, rows))

    whole = hits(256)
    assert 0 < whole.sum() < 150  # some right, some wrong: rows out of order would move the hits
    for batch in (7, 64):
        np.testing.assert_array_equal(hits(batch), whole)
