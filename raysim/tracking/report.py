"""``raysim report EXPERIMENT``: the finished runs of an MLflow experiment side by side, per method.

Reads the tracking store only (no Ray): each run's ``summary.*`` metrics (final value and last-10 mean, logged
at the end of every run) and its ``global_acc`` history. Writes ``report.md`` (one row per method: runs, and the
mean over them of each statistic), ``accuracy_curves.png`` (every run's global accuracy, coloured by method)
and ``global_vs_worst.png`` (global against worst-local accuracy, as the papers compare methods).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from raysim.core.errors import ConfigError
from raysim.tracking.plots import plot_compared_curves, plot_global_vs_worst

COLUMNS = (
    ("global_acc", "final"),
    ("global_acc", "mean"),
    ("local_acc", "mean"),
    ("worst_local_acc", "mean"),
    ("sigma_client", "mean"),
    ("sigma_type", "mean"),
    ("cluster_acc", "final"),
)


def collect(uri: str, experiment: str) -> list[dict]:
    """The experiment's FINISHED runs: name, method, summary statistics and global-accuracy curve."""
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise ConfigError(f"no experiment {experiment!r} in {uri}; experiments: {', '.join(names) or 'none'}")
    runs = client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'")
    out = []
    for run in runs:
        history = client.get_metric_history(run.info.run_id, "global_acc")
        latest = {}
        for m in sorted(history, key=lambda m: m.timestamp):  # a replayed round keeps its latest value
            latest[m.step] = m.value
        out.append(
            {
                "name": run.info.run_name,
                "method": run.data.tags.get("method", "?"),
                "summary": {k: v for k, v in run.data.metrics.items() if k.startswith("summary.")},
                "curve": (sorted(latest), [latest[s] for s in sorted(latest)]),
            }
        )
    if not out:
        raise ConfigError(f"experiment {experiment!r} has no finished run yet")
    return out


def write_report(uri: str, experiment: str, folder: str | Path) -> tuple[str, list[Path]]:
    """The comparison table (markdown) and the files written under ``folder``."""
    runs = collect(uri, experiment)
    by_method: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        by_method[run["method"]].append(run)
    columns = [(k, s) for k, s in COLUMNS if any(f"summary.{k}.{s}" in r["summary"] for r in runs)]
    header = "| method | runs | " + " | ".join(f"{k} ({'last-10 mean' if s == 'mean' else s})" for k, s in columns)
    lines = [header + " |", "|---" * (len(columns) + 2) + "|"]
    points = {}
    for method, group in sorted(by_method.items()):
        stats = [
            np.mean([r["summary"][f"summary.{k}.{s}"] for r in group if f"summary.{k}.{s}" in r["summary"]] or [np.nan])
            for k, s in columns
        ]
        lines.append(f"| {method} | {len(group)} | " + " | ".join(f"{v:.2f}" for v in stats) + " |")
        means = dict(zip(columns, stats))
        if ("worst_local_acc", "mean") in means:
            points[method] = (means[("global_acc", "mean")], means[("worst_local_acc", "mean")])
    table = "\n".join(lines)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "report.md", folder / "accuracy_curves.png", folder / "global_vs_worst.png"]
    paths[0].write_text(f"# {experiment}: {len(runs)} finished runs ({uri})\n\n{table}\n")
    plot_compared_curves(
        {r["name"]: r["curve"] for r in runs},
        {r["name"]: r["method"] for r in runs},
        f"{experiment}: global accuracy",
        paths[1],
    )
    plot_global_vs_worst(points, f"{experiment}: global vs worst client", paths[2])
    return table, paths
