"""Pictures saved as MLflow artifacts: accuracy curves, the global-vs-worst-local view, selection maps."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CURVES = (("global_acc", "global"), ("local_acc", "local (mean client)"),
          ("worst_local_acc", "worst client"), ("unseen_acc", "unseen clients"))


def plot_accuracy_curves(history: list[dict[str, float]], title: str, path: str | Path) -> None:
    """Accuracy (%) per evaluated round for each accuracy metric present."""
    rounds = [h["round"] for h in history if "global_acc" in h]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for key, label in CURVES:
        values = [h[key] for h in history if "global_acc" in h and key in h]
        if len(values) == len(rounds) and values:
            ax.plot(rounds, values, marker="o", markersize=3, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_client_accuracy(client_acc: dict[int, float], title: str, path: str | Path) -> None:
    """Final accuracy of every client, sorted, with the worst and the mean marked."""
    values = sorted(client_acc.values())
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.bar(range(len(values)), values, width=1.0, color="tab:blue")
    if values:
        ax.axhline(sum(values) / len(values), color="tab:orange", label="mean client")
        ax.axhline(values[0], color="tab:red", linestyle="--", label="worst client")
    ax.set_xlabel("clients, sorted by accuracy")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_selection_map(counts, title: str, path: str | Path) -> None:
    """Rows per group for every client ([clients, groups]), each client's row normalised: who uses which group."""
    counts = np.asarray(counts, dtype=float)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=120)
    image = ax.imshow(shares, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="share of the client's test rows")
    ax.set_xlabel("group")
    ax.set_ylabel("client")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_selection_stability(counts, rounds: list[int], title: str, path: str | Path) -> None:
    """SGPT Fig. 3: mean and std over evaluated rounds of one client's rows per group ([rounds, groups])."""
    counts = np.asarray(counts, dtype=float)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.bar(range(counts.shape[1]), counts.mean(axis=0), yerr=counts.std(axis=0), capsize=3, color="tab:blue")
    ax.set_xlabel("group")
    ax.set_ylabel(f"rows per group (rounds {rounds[0]}-{rounds[-1]})")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
