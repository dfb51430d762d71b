"""The client runtime's evaluation reads many clients' test rows in windows that give the batches one
concatenation would give, without holding them all at once."""

from __future__ import annotations

import numpy as np

from raysim.data.shards import ClientData
from raysim.engine.client import windows


def part(first: int, rows: int) -> ClientData:
    values = np.arange(first, first + rows)
    return ClientData(values[:, None], values, values, {"query": values[:, None] * 2})


def test_windows_cut_the_concatenation_into_equal_slices_across_clients():
    parts = [part(0, 3), part(3, 7), part(10, 0), part(10, 2)]
    got = list(windows(parts, 5))
    assert [len(w) for w in got] == [5, 5, 2]
    whole = ClientData.concat(parts)
    assert np.array_equal(np.concatenate([w.labels for w in got]), whole.labels)
    assert np.array_equal(np.concatenate([w.features["query"] for w in got]), whole.features["query"])
    assert list(windows([], 5)) == [] and [len(w) for w in windows([part(0, 10)], 5)] == [5, 5]
