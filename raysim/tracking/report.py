"""``raysim report EXPERIMENT``: the finished runs of an MLflow experiment side by side, per method.

Reads the tracking store only (no Ray): each run's summary metrics (final value and last-10 mean, logged at the end
of every run; ``summary/<metric>_<stat>``, or ``summary.<metric>.<stat>`` for runs logged before) and its
``global_acc`` history. Writes ``report.md`` (one row per method: runs, and the mean over them of each statistic;
then one row per run), ``accuracy_curves.png`` (every run's global accuracy, coloured by method) and
``global_vs_worst.png`` (global against worst-local accuracy, as the papers compare methods). A sweep's report
(``parent_run_id``) covers its trials, coloured one by one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from raysim.base.errors import ConfigError
from raysim.tracking.mlflow import ATTACK, COMPARE, KIND, SWEEP, every_run, live_experiment, store_client, summary_key
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


def latest_by_step(history) -> dict[int, float]:
    """A metric's history as {step: value}; a replayed round (after a recovery or a resume) keeps its latest value."""
    return {m.step: m.value for m in sorted(history, key=lambda m: m.timestamp)}


def collect(uri: str, experiment: str, parent_run_id: str | None = None) -> list[dict]:
    """The experiment's FINISHED runs (those nested under ``parent_run_id`` if given; never a sweep's or a
    comparison's own run, nor an attack's): name, method, tags, latest metrics, summary statistics {(metric, stat):
    value} and global-accuracy curve."""
    client = store_client(uri)
    found = live_experiment(client, uri, experiment)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise ConfigError(f"no experiment {experiment!r} in {uri}; experiments: {', '.join(names) or 'none'}")
    query = "attributes.status = 'FINISHED'"
    if parent_run_id:
        query += f" and tags.`mlflow.parentRunId` = '{parent_run_id}'"
    found_runs = every_run(client, found.experiment_id, query)
    runs = [r for r in found_runs if r.data.tags.get(KIND) not in (SWEEP, COMPARE, ATTACK)]
    out = []
    for run in runs:
        history = client.get_metric_history(run.info.run_id, "global_acc")
        latest = latest_by_step(history)
        summary = {summary_key(k): v for k, v in run.data.metrics.items() if summary_key(k)}
        out.append(
            {
                "id": run.info.run_id,
                "name": run.info.run_name,
                "method": run.data.tags.get("method", "?"),
                "tags": run.data.tags,
                "metrics": run.data.metrics,
                "summary": summary,
                "curve": (sorted(latest), [latest[s] for s in sorted(latest)]),
            }
        )
    if not out:
        raise ConfigError(f"experiment {experiment!r} has no finished run yet")
    return out


def _header(first: list[str], columns: list[tuple[str, str]]) -> list[str]:
    stats = [f"{k} ({'last-10 mean' if s == 'mean' else s})" for k, s in columns]
    return ["| " + " | ".join([*first, *stats]) + " |", "|---" * (len(first) + len(columns)) + "|"]


def _cells(values) -> str:
    return " | ".join("" if np.isnan(v) else f"{v:.2f}" for v in values)


def short_labels(names: list[str]) -> dict[str, str]:
    """Each name without the leading and trailing '-'-separated parts all names share (a sweep's trials: their
    hashes)."""
    parts = [name.split("-") for name in names]
    shortest = min((len(p) for p in parts), default=0)

    def shared(index) -> bool:
        return len(names) > 1 and all(p[index] == parts[0][index] for p in parts)

    front = next((i for i in range(shortest) if not shared(i)), shortest)
    back = next((i for i in range(shortest - front) if not shared(-1 - i)), shortest - front)
    if front + back >= shortest:  # identical names
        return {name: name for name in names}
    return {name: "-".join(p[front : len(p) - back]) for name, p in zip(names, parts)}


def _means(runs: list[dict], columns: list[tuple[str, str]]) -> list[float]:
    """Each column's mean over the runs that hold a number for it (a run's NaN, a diagnostic without rows to rest
    on, leaves that run out instead of blanking the cell)."""
    return [np.mean([v for r in runs if np.isfinite(v := r["summary"].get(c, np.nan))] or [np.nan]) for c in columns]


def write_report(
    uri: str, experiment: str, folder: str | Path, parent_run_id: str | None = None
) -> tuple[str, list[Path]]:
    """The comparison table per method (markdown) and the files written under ``folder``. The figures colour the
    runs by method, or, when all are of one method (a sweep's trials), by what tells their names apart."""
    runs = sorted(collect(uri, experiment, parent_run_id), key=lambda r: (r["method"], r["name"]))
    columns = [c for c in COLUMNS if any(c in r["summary"] for r in runs)]
    by_method: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        by_method[run["method"]].append(run)
    lines = _header(["method", "runs"], columns)
    for method, group in sorted(by_method.items()):
        lines.append(f"| {method} | {len(group)} | {_cells(_means(group, columns))} |")
    table = "\n".join(lines)
    per_run = _header(["run", "method"], columns) + [
        f"| {r['name']} | {r['method']} | {_cells([r['summary'].get(c, np.nan) for c in columns])} |" for r in runs
    ]
    labels = short_labels([r["name"] for r in runs])
    group_of = {r["id"]: r["method"] if len(by_method) > 1 else labels[r["name"]] for r in runs}
    groups: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        groups[group_of[run["id"]]].append(run)
    points = {}
    if {("global_acc", "mean"), ("worst_local_acc", "mean")} <= set(columns):
        for label, group in groups.items():
            means = dict(zip(columns, _means(group, columns)))
            points[label] = (means[("global_acc", "mean")], means[("worst_local_acc", "mean")])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "report.md", folder / "accuracy_curves.png", folder / "global_vs_worst.png"]
    paths[0].write_text(
        f"# {experiment}: {len(runs)} finished runs ({uri})\n\n{table}\n\n## Runs\n\n" + "\n".join(per_run) + "\n"
    )
    plot_compared_curves({r["id"]: r["curve"] for r in runs}, group_of, f"{experiment}: global accuracy", paths[1])
    plot_global_vs_worst(points, f"{experiment}: global vs worst client", paths[2])
    return table, paths
