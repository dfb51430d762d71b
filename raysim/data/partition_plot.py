"""A picture and a summary of a partition: samples per (client, class) and client sizes.

Uses :class:`matplotlib.figure.Figure` directly (no pyplot), so it renders with Agg in any process
without touching the global backend.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

if TYPE_CHECKING:
    from raysim.data.shards import ShardStore

_MAX_ROWS = 200


class PartitionArtifacts(NamedTuple):
    """What a run logs of its partition (:func:`partition_artifacts`)."""

    summary: dict
    counts: bytes
    picture: bytes


def _counts(train_client: np.ndarray, labels: np.ndarray, num_clients: int, num_classes: int) -> np.ndarray:
    """[M, C] int64 train samples per client and class; unassigned samples (client -1) are left out."""
    keep = train_client >= 0
    flat = train_client[keep].astype(np.int64) * num_classes + np.asarray(labels)[keep]
    return np.bincount(flat, minlength=num_clients * num_classes).reshape(num_clients, num_classes)


def partition_summary(train_client: np.ndarray, labels: np.ndarray, num_clients: int, num_classes: int) -> dict:
    """Clients, classes per client and client sizes (mean/min/max), and the [M, C] ``counts`` matrix."""
    counts = _counts(train_client, labels, num_clients, num_classes)
    classes = (counts > 0).sum(axis=1)
    sizes = counts.sum(axis=1)
    return {
        "clients": num_clients,
        "classes_per_client_mean": float(classes.mean()),
        "classes_per_client_min": int(classes.min()),
        "classes_per_client_max": int(classes.max()),
        "size_mean": float(sizes.mean()),
        "size_min": int(sizes.min()),
        "size_max": int(sizes.max()),
        "counts": counts,
    }


def plot_partition(train_client: np.ndarray, labels: np.ndarray, num_clients: int, num_classes: int, path) -> None:
    """Save a PNG: heat map of samples per (client, class) on the left, client sizes on the right."""
    counts = _counts(train_client, labels, num_clients, num_classes)[:_MAX_ROWS]
    shown = len(counts)
    fig = Figure(figsize=(10, max(3.0, min(12.0, 0.06 * shown + 2))), layout="constrained")
    heat, bars = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 1]})
    image = heat.imshow(counts, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(image, ax=heat, label="train samples")
    heat.set_xlabel("class")
    heat.set_ylabel("client")
    for axis in (heat.xaxis, heat.yaxis, bars.xaxis):  # classes, clients and sample counts are whole numbers
        axis.set_major_locator(MaxNLocator(integer=True))
    title = "samples per client and class"
    if num_clients > shown:
        title += f" (first {shown} of {num_clients} clients)"
    heat.set_title(title)
    bars.barh(np.arange(shown), counts.sum(axis=1), height=1.0, color="tab:blue")
    bars.set_xlabel("train samples")
    bars.set_title("client size")
    fig.savefig(path, dpi=100)


def partition_artifacts(shards: ShardStore) -> PartitionArtifacts:
    """A run's partition: its summary (:func:`partition_summary` with the held-out clients; ``partition_summary.json``),
    every client's train counts per class and test size (``partition_counts.safetensors``: ``train_counts`` [M, C]
    and ``test_sizes`` [M], int32; a table, so that a million clients stay a few bytes each) and its picture
    (:func:`plot_partition` as PNG bytes; ``partition.png``)."""
    from safetensors.numpy import save

    train_client = np.repeat(np.arange(shards.num_clients), shards.train_sizes())
    labels = shards.labels[: shards.train_offsets[-1]]
    summary = partition_summary(train_client, labels, shards.num_clients, shards.info.num_classes)
    counts = summary.pop("counts")
    summary["unseen_clients"] = list(shards.unseen)
    table = save({"train_counts": counts.astype(np.int32), "test_sizes": shards.test_sizes().astype(np.int32)})
    picture = io.BytesIO()
    plot_partition(train_client, labels, shards.num_clients, shards.info.num_classes, picture)
    return PartitionArtifacts(summary, table, picture.getvalue())
