"""Pictures saved as MLflow artifacts: accuracy curves and the global-vs-worst-local view."""

from __future__ import annotations

from pathlib import Path

import matplotlib

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
