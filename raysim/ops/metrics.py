"""Evaluation metrics with the same keys for every method, and the papers' last-10-rounds summary.

Definitions (the protocol SGPT, FGPT, FedGCR and FedV report with): global accuracy pools all test rows of the
seen clients; local accuracy is the mean of per-client accuracies; sigma_* are population std devs.
"""

from __future__ import annotations

import numpy as np

ACCURACY_KEYS = (
    "global_acc",
    "local_acc",
    "avg_acc",
    "worst_local_acc",
    "sigma_client",
    "sigma_type",
    "unseen_acc",
    "generic_acc",
    "cluster_acc",
)
ROUND_KEYS = (
    "train_loss",
    "bytes_down",
    "bytes_up",
    "bytes_down_total",
    "bytes_up_total",
    "round_time_s",
    "train_samples_per_s",
    "eval_time_s",
    "rejected_updates",
)  # logged by the round loop for every method
PRIVACY_KEYS = ("privacy_epsilon", "privacy_clip", "privacy_next_clip", "privacy_unclipped_share", "secagg_lost")
SUMMARY_WINDOW = 10
# keys that measure the machine, not the method: they differ between runs that are otherwise identical
TIMING_KEYS = frozenset(
    {
        "round_time_s",
        "train_samples_per_s",
        "eval_time_s",
        "client_compute_s",
        "server_compute_s",
        "transfer_s",
        "server_concurrency",
    }
)


def reported_metrics(info) -> set[str]:
    """Every per-round key a method's runs may log: the shared ones and its own (``MethodInfo.metrics``)."""
    return {*ACCURACY_KEYS, *ROUND_KEYS, *PRIVACY_KEYS, *info.metrics}


def accuracy_metrics(
    counts: dict[int, tuple[int, int]], seen: list[int], unseen: list[int], client_type: np.ndarray | None = None
) -> dict[str, float]:
    """Accuracy metrics in percent from per-client (correct, total) test counts.

    Clients without test rows count in no mean. When clients have types, ``sigma_type`` (the std of the
    per-type mean client accuracies) and ``avg_acc`` (FedGCR's "Avg", the mean client accuracy, equal to
    ``local_acc``) are reported; ``unseen_acc`` when some clients are held out.
    """
    seen = [c for c in seen if counts[c][1] > 0]
    correct = np.array([counts[c][0] for c in seen], dtype=np.float64)
    total = np.array([counts[c][1] for c in seen], dtype=np.float64)
    per_client = 100.0 * correct / total
    out = {
        "global_acc": 100.0 * correct.sum() / total.sum(),
        "local_acc": float(per_client.mean()),
        "worst_local_acc": float(per_client.min()),
        "sigma_client": float(per_client.std()),
    }
    if client_type is not None:
        types = np.asarray(client_type)[seen]
        out["sigma_type"] = float(np.std(list(type_means(per_client, types).values())))
        out["avg_acc"] = out["local_acc"]
    held = [c for c in unseen if counts[c][1] > 0]
    if held:
        out["unseen_acc"] = 100.0 * sum(counts[c][0] for c in held) / sum(counts[c][1] for c in held)
    return out


def generic_accuracy(counts: dict[int, tuple[int, int]], seen: list[int]) -> float:
    """A personalised method's ``generic_acc``: the global model's accuracy pooled over the test rows of the clients
    that train, each of whom ``global_acc`` evaluates with its own model (Fed-RoD's G-FL beside its P-FL)."""
    return accuracy_metrics(counts, seen, [])["global_acc"]


def type_means(per_client: np.ndarray, types: np.ndarray) -> dict[int, float]:
    """Mean client accuracy of each client type present."""
    return {int(t): float(per_client[types == t].mean()) for t in np.unique(types)}


def client_accuracies(counts: dict[int, tuple[int, int]]) -> dict[int, float]:
    """Per-client accuracy in percent (clients with test rows only)."""
    return {c: 100.0 * k / n for c, (k, n) in sorted(counts.items()) if n > 0}


def summarise(history: list[dict[str, float]], window: int = SUMMARY_WINDOW) -> dict[str, dict[str, float]]:
    """Mean and variance of each accuracy metric over the last ``window`` evaluated rounds, plus the final value."""
    evaluated = [h for h in history if "global_acc" in h]
    out = {}
    for key in ACCURACY_KEYS:
        values = np.array([h[key] for h in evaluated[-window:] if key in h])
        if len(values):
            out[key] = {"final": float(values[-1]), "mean": float(values.mean()), "var": float(values.var())}
    return out
