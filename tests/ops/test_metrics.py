import numpy as np
import pytest

from raysim.ops.metrics import accuracy_metrics, summarise


def test_accuracy_metrics_hand_computed():
    counts = {0: (8, 10), 1: (1, 2), 2: (0, 0), 3: (3, 4), 4: (2, 2)}
    out = accuracy_metrics(counts, seen=[0, 1, 2, 3], unseen=[4], client_type=np.array([0, 1, 1, 0, 1]))
    # seen clients with test rows: 0 (80%), 1 (50%), 3 (75%); client 2 has no rows
    assert out["global_acc"] == pytest.approx(100 * 12 / 16)
    assert out["local_acc"] == pytest.approx((80 + 50 + 75) / 3)
    assert out["worst_local_acc"] == pytest.approx(50)
    assert out["sigma_client"] == pytest.approx(np.std([80, 50, 75]))
    # type 0: clients 0, 3 -> 77.5; type 1: client 1 -> 50
    assert out["sigma_type"] == pytest.approx(np.std([77.5, 50]))
    assert out["avg_acc"] == out["local_acc"]  # FedGCR's "Avg"
    assert out["unseen_acc"] == pytest.approx(100.0)


def test_type_accuracy_table_and_picture(tmp_path):
    from raysim.tracking.plots import plot_type_accuracy, type_accuracy_table

    table = type_accuracy_table({0: 80.0, 1: 50.0, 3: 70.0}, np.array([0, 1, 1, 0]), ("photo", "sketch"))
    assert table == {
        "photo": {"clients": 2.0, "mean_acc": 75.0, "std_acc": 5.0},
        "sketch": {"clients": 1.0, "mean_acc": 50.0, "std_acc": 0.0},
    }
    plot_type_accuracy(table, "t", tmp_path / "types.png")
    assert (tmp_path / "types.png").stat().st_size > 1000


def test_no_type_or_unseen_keys_when_not_defined():
    out = accuracy_metrics({0: (1, 2)}, seen=[0], unseen=[])
    assert "sigma_type" not in out and "avg_acc" not in out and "unseen_acc" not in out


def test_summary_uses_last_ten_evaluated_rounds():
    history = [{"round": r, "global_acc": float(r)} for r in range(1, 16)]
    history.insert(3, {"round": 99, "bytes_up": 1.0})  # not evaluated: ignored
    summary = summarise(history)["global_acc"]
    assert summary["final"] == 15.0
    assert summary["mean"] == pytest.approx(np.mean(range(6, 16)))
    assert summary["var"] == pytest.approx(np.var(range(6, 16)))
