"""Pictures saved as MLflow artifacts and by ``raysim report``: accuracy curves, the global-vs-worst-local view,
selection maps. One style, so pictures compare: accuracy axes always span 0-100 %, rounds, clients and groups get
whole-number ticks, and curves share one size."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

CURVES_SIZE = (7.2, 4.4)  # inches: per-run curves and the report's overlaid ones
CURVES = (
    ("global_acc", "global"),
    ("local_acc", "local (mean client)"),
    ("worst_local_acc", "worst client"),
    ("unseen_acc", "unseen clients"),
    ("generic_acc", "generic (the global model)"),
)


X_LABELS = {  # what a run's accuracy curves are drawn against
    "round": "round",
    "sim_time_s": "virtual time (s)",
    "bytes_up_total": "bytes uploaded so far",
    "bytes_down_total": "bytes downloaded so far",
}


def palette(count: int) -> list:
    """``count`` distinct colours: matplotlib's ten defaults, tab20's twenty, then evenly spaced along turbo."""
    if count <= 10:
        return [f"C{i}" for i in range(count)]
    if count <= 20:
        return list(plt.get_cmap("tab20").colors[:count])
    return [plt.get_cmap("turbo")(i / (count - 1)) for i in range(count)]


def accuracy_axis(ax, axis: str = "y") -> None:
    """An accuracy axis in %: always 0-100, so every run's plot reads on the same scale."""
    (ax.set_ylim if axis == "y" else ax.set_xlim)(0, 100)


def integer_axis(ax, axis: str = "x") -> None:
    """Whole-number ticks only (rounds, clients, groups): no round 1.25."""
    getattr(ax, f"{axis}axis").set_major_locator(MaxNLocator(integer=True))


def plot_accuracy_curves(history: list[dict[str, float]], title: str, path: str | Path, x: str = "round") -> None:
    """Accuracy (%) per evaluated round for each accuracy metric present, against the round or, with
    ``x="sim_time_s"``, the virtual clock (time-to-accuracy), or with ``x="bytes_up_total"`` (``"bytes_down_total"``)
    the bytes uploaded (downloaded) so far (a compression's accuracy for its bytes)."""
    rounds = [h[x] for h in history if "global_acc" in h]
    fig, ax = plt.subplots(figsize=CURVES_SIZE, dpi=120)
    for key, label in CURVES:
        values = [h[key] for h in history if "global_acc" in h and key in h]
        if len(values) == len(rounds) and values:
            ax.plot(rounds, values, marker="o", markersize=3, label=label)
    ax.set_ylabel("accuracy (%)")
    ax.set_xlabel(X_LABELS[x])
    if x == "round":
        integer_axis(ax, "x")
    accuracy_axis(ax, "y")
    _finish(fig, ax, title, path, legend=True)


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
    integer_axis(ax, "x")
    accuracy_axis(ax, "y")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_type_accuracy(table: dict[str, dict[str, float]], title: str, path: str | Path) -> None:
    """Mean client accuracy per client type (bars, with the clients' spread), from :func:`type_accuracy_table`."""
    names = list(table)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.bar(
        names,
        [table[n]["mean_acc"] for n in names],
        yerr=[table[n]["std_acc"] for n in names],
        color="tab:blue",
        capsize=4,
    )
    for i, n in enumerate(names):
        ax.annotate(f"{table[n]['clients']:.0f} clients", (i, 0), ha="center", va="bottom", fontsize=7, color="white")
    ax.set_ylabel("mean client accuracy (%)")
    accuracy_axis(ax, "y")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def type_accuracy_table(
    client_acc: dict[int, float], client_type: np.ndarray, type_names
) -> dict[str, dict[str, float]]:
    """Per client type: number of evaluated clients, mean and population std of their accuracies."""
    table = {}
    for t in np.unique(np.asarray(client_type)[list(client_acc)]):
        values = np.array([a for c, a in client_acc.items() if client_type[c] == t])
        name = type_names[t] if t < len(type_names) else str(t)
        table[name] = {"clients": float(len(values)), "mean_acc": float(values.mean()), "std_acc": float(values.std())}
    return table


def plot_selection_map(counts, title: str, path: str | Path) -> None:
    """Rows per group for every client ([clients, groups]), each client's row normalised: who uses which group."""
    counts = np.asarray(counts, dtype=float)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=120)
    image = ax.imshow(shares, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="share of the client's test rows")
    ax.set_xlabel("group")
    ax.set_ylabel("client")
    integer_axis(ax, "x")
    integer_axis(ax, "y")
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
    integer_axis(ax, "x")
    ax.set_ylabel(f"rows per group (rounds {rounds[0]}-{rounds[-1]})")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_compared_curves(
    curves: dict[str, tuple[list[float], list[float]]],
    groups: dict[str, str],
    title: str,
    path: str | Path,
    x_label: str = "round",
) -> None:
    """Global accuracy per round (or against ``x_label``: the virtual clock's time-to-accuracy) of several runs
    overlaid (``raysim report``, ``raysim compare``), one colour and legend entry per group (``groups``: run -> its
    method, say)."""
    names = sorted(set(groups.values()))
    colours = dict(zip(names, palette(len(names)), strict=True))
    fig, ax = plt.subplots(figsize=CURVES_SIZE, dpi=120)
    shown = set()
    for run, (rounds, values) in curves.items():
        group = groups[run]
        label = None if group in shown else group  # markers: a run evaluated once is a point, not an empty line
        ax.plot(rounds, values, color=colours[group], alpha=0.8, marker="o", markersize=3, label=label)
        shown.add(group)
    ax.set_xlabel(x_label)
    ax.set_ylabel("global accuracy (%)")
    if x_label == "round":
        integer_axis(ax, "x")
    accuracy_axis(ax, "y")
    _finish(fig, ax, title, path, legend=True)


def plot_global_vs_worst(points: dict[str, tuple[float, float]], title: str, path: str | Path) -> None:
    """Each method's (or group's) global accuracy against its worst client's (last-10 means), as the papers plot
    them."""
    fig, ax = plt.subplots(figsize=(5.6, 4.6), dpi=120)
    for colour, (label, (global_acc, worst)) in zip(palette(len(points)), sorted(points.items()), strict=True):
        ax.scatter([global_acc], [worst], color=colour, s=40)
        ax.annotate(label, (global_acc, worst), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("global accuracy (%), mean of the last 10 evaluations")
    ax.set_ylabel("worst local accuracy (%)")
    accuracy_axis(ax, "x")
    accuracy_axis(ax, "y")
    _finish(fig, ax, title, path, legend=False)


def plot_tradeoff(
    points: dict[str, tuple[float, float, float, float]],
    front: list[str],
    x_label: str,
    title: str,
    path: str | Path,
    log_x: bool = False,
) -> None:
    """Global accuracy (y) against a cost (x: sigma, bytes) per method: (x, x CI, y, y CI) as a point with error
    bars (none where the CI is NaN), the Pareto ``front`` joined by a dashed line (``raysim compare``)."""
    fig, ax = plt.subplots(figsize=(5.8, 4.6), dpi=120)
    for colour, (label, (x, x_half, y, y_half)) in zip(palette(len(points)), points.items(), strict=True):
        if np.isnan(x) or np.isnan(y):
            continue
        ax.errorbar(
            [x],
            [y],
            xerr=None if np.isnan(x_half) else [x_half],
            yerr=None if np.isnan(y_half) else [y_half],
            fmt="o",
            color=colour,
            capsize=3,
            label=label,
        )
    if len(front) > 1:
        ax.plot([points[m][0] for m in front], [points[m][2] for m in front], "k--", alpha=0.4, label="Pareto front")
    ax.set_xlabel(x_label)
    ax.set_ylabel("global accuracy (%), last-10 mean")
    if log_x:
        ax.set_xscale("log")
    accuracy_axis(ax, "y")
    _finish(fig, ax, title, path, legend=True)


def _finish(fig, ax, title: str, path: str | Path, legend: bool) -> None:
    """Title, light grid, legend if asked, then save and free the figure."""
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
