"""The attacks' pictures, logged to their MLflow runs: originals beside reconstructions, and the membership ROC."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def reconstruction_grid(
    originals: np.ndarray,
    reconstructions: np.ndarray,
    captions: list[str],
    path: str | Path,
    names: tuple[str, str] = ("original", "reconstruction"),
) -> None:
    """Two rows, originals above their reconstructions (images ``[N, H, W, C]`` in [0, 1]), each column captioned,
    the rows named ``names``."""
    count = len(originals)
    figure, axes = plt.subplots(2, count, figsize=(1.6 * count + 0.6, 3.6), squeeze=False)
    for column in range(count):
        for row, (images, name) in enumerate(zip((originals, reconstructions), names)):
            ax = axes[row][column]
            ax.imshow(images[column], interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if column == 0:
                ax.set_ylabel(name)
        axes[1][column].set_xlabel(captions[column], fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def roc_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]], title: str, path: str | Path) -> None:
    """ROC curves (name -> (FPR, TPR)) on log-log axes (the low false-positive rates show), with chance as a dashed
    diagonal."""
    figure, ax = plt.subplots(figsize=(4.4, 4.4))
    floor = 1e-4
    for name, (fpr, tpr) in curves.items():
        ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), label=name)
    ax.plot([floor, 1], [floor, 1], linestyle="--", color="grey", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
