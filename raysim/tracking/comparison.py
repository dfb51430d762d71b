"""The report of ``raysim compare`` (and of ``raysim report`` on a comparison's experiment): methods over seeds.

Reads the tracking store only. The cells are the experiment's FINISHED runs tagged with the comparison's name
(:data:`CELL`: ``METHOD/sSEED``). For each method: the mean and the 95% confidence interval (Student's t over the
seeds) of the papers' metrics, the bytes it exchanged per round and its trainable parameters; then, for every other
method, the paired comparison with the first method named: the mean over seeds of (method - first), its 95% CI, and
how many seeds agree with the sign of the mean; where the values were tuned, the same again without the seed they
were tuned on (:func:`tuning_seeds`). For the group-prompt methods, their selection diagnostics
(:data:`SELECTION`) likewise, paired with the first of them. Figures: accuracy against fairness (sigma) and against
bytes per round, each method's mean with its CIs as error bars, the Pareto front drawn through the methods no other
beats on both axes; with the virtual clock (docs/systems.md), accuracy against virtual time. The same figures as
metrics of the comparison's own run (:func:`comparison_metrics`), so MLflow's runs table shows them in its row.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from raysim.base.errors import ConfigError
from raysim.tracking.mlflow import COMPARE, KIND, TRAINABLE, store_client
from raysim.tracking.plots import plot_compared_curves, plot_tradeoff
from raysim.tracking.report import collect, latest_by_step
from raysim.tracking.statistics import finite, interval, paired, pareto_front

NAME, CELL, VARIANT = "raysim.compare", "raysim.cell", "raysim.variant"  # tags of every cell
TUNING, TUNED = "raysim.tuning", "raysim.tuned"  # how its values were chosen, and the tuned values (JSON)
TUNING_SEED = "raysim.tuning_seed"  # the seed the tuned values were chosen on (tuned cells only)
METHODS_TAG, SEEDS_TAG = "compare.methods", "compare.seeds"  # the comparison's own run: what its last command asked
STATISTICS = (
    ("global_acc", "final"),
    ("global_acc", "mean"),
    ("generic_acc", "mean"),  # a personalised method's global model (its global_acc: the clients' own models)
    ("local_acc", "mean"),
    ("worst_local_acc", "mean"),
    ("sigma_type", "mean"),
    ("sigma_client", "mean"),
)
SELECTION = (  # the group-prompt methods' selection diagnostics at the final evaluation (SGPT Table 4, Fig. 3, D.2)
    ("cluster_top_share", "rows in the largest group (%)", 100.0, 2),
    ("cluster_groups_used", "groups holding >= 1% of rows", 1.0, 2),
    ("cluster_acc", "clustering accuracy (%)", 1.0, 2),
    ("kmeans_congruence", "congruence with K-Means (%)", 1.0, 2),
    ("selection_instability", "selection instability", 1.0, 3),
)
BYTES = "bytes_per_round"
GIT_COMMIT, GIT_DIRTY = "mlflow.source.git.commit", "mlflow.source.git.dirty"  # MLflow's tags of a run's checkout
CLOCK = "sim_time_s"  # the virtual clock (docs/systems.md)


def cell_label(method: str, seed: int) -> str:
    """A cell's name, as its :data:`CELL` tag and the comparison's messages give it: ``METHOD/sSEED``."""
    return f"{method}/s{seed}"


def _bytes_per_round(client: MlflowClient, run_id: str) -> float:
    """Mean over rounds of the bytes sent down and up."""
    total: dict[int, float] = defaultdict(float)
    for key in ("bytes_down", "bytes_up"):
        for step, value in latest_by_step(client.get_metric_history(run_id, key)).items():
            total[step] += value
    return float(np.mean(list(total.values()))) if total else float("nan")


def cells(uri: str, experiment: str) -> list[dict]:
    """The comparison's finished cells: each run of :func:`collect` with its seed and bytes per round."""
    client = store_client(uri)
    found = [run for run in collect(uri, experiment) if CELL in run["tags"]]
    if not found:
        raise ConfigError(f"experiment {experiment!r} has no finished run of raysim compare")
    for run in found:
        run["seed"] = int(run["tags"]["seed"])
        run["method"] = run["tags"].get(VARIANT, run["method"])  # the method as the comparison named it
        run["summary"][(BYTES, "mean")] = _bytes_per_round(client, run["id"])
        if CLOCK in run["metrics"]:  # the virtual clock at each evaluated round, for time-to-accuracy
            clock = latest_by_step(client.get_metric_history(run["id"], CLOCK))
            rounds, accuracy = run["curve"]
            run["timed_curve"] = ([clock[r] for r in rounds], accuracy)
    return found


def is_comparison(uri: str, experiment: str) -> bool:
    """Whether ``experiment`` holds runs of ``raysim compare``."""
    client = store_client(uri)
    found = client.get_experiment_by_name(experiment)
    return found is not None and bool(
        client.search_runs([found.experiment_id], filter_string=f"tags.`{NAME}` != ''", max_results=1)
    )


def named_order(uri: str, experiment: str) -> list[str]:
    """The methods in the order ``raysim compare`` last named them (its own run's ``compare.methods`` tag; the param
    of its first command where a run has no tag); empty if none."""
    client = store_client(uri)
    found = client.get_experiment_by_name(experiment)
    query = f"tags.`{KIND}` = '{COMPARE}'"
    own = client.search_runs([found.experiment_id], filter_string=query, max_results=1) if found else []
    if not own:
        return []
    return own[0].data.tags.get(METHODS_TAG, own[0].data.params.get(METHODS_TAG, "")).split()


def _cell(mean: float, half: float, digits: int = 2) -> str:
    if np.isnan(mean):
        return ""
    return f"{mean:.{digits}f}" if np.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def seeds_of(runs: list[dict]) -> int:
    """How many seeds ``runs`` (one method's cells) cover."""
    return len({r["seed"] for r in runs})


def _over(values: dict[int, float], seeds: int, digits: int = 2) -> str:
    """The mean ± CI of ``values`` (one per seed), saying over how many seeds where fewer than the method's
    ``seeds`` logged a number."""
    shown = _cell(*interval(list(values.values())), digits)
    return f"{shown} (n={len(values)})" if shown and len(values) < seeds else shown


def _paired_cell(first: dict[int, float], other: dict[int, float], digits: int = 2) -> str:
    """``other - first`` paired over their common seeds, with how many agree in sign and whether the CI excludes 0."""
    mean, half, agree, n = paired(first, other)
    if not n:
        return ""
    excludes = not np.isnan(half) and abs(mean) > half
    return f"{_cell(mean, half, digits)} ({agree}/{n} seeds agree{'; CI excludes 0' if excludes else ''})"


def _described(runs: list[dict]) -> list[str]:
    """The lines saying what the table rests on: seeds, tuning, CPU, precision, setting."""
    tags = runs[0]["tags"]
    seeds = sorted({r["seed"] for r in runs})
    tuning = sorted({r["tags"].get(TUNING, "presets") for r in runs})
    note = tags.get("mlflow.note.content", "").split(";")[0].rsplit(", seed ", 1)[0]  # one cell's: not its seed
    setting = note.split(" on ", 1)[1] if " on " in note else note
    tuned = {r["method"]: r["tags"][TUNED] for r in runs if r["tags"].get(TUNED, "{}") != "{}"}
    return [
        f"- seeds: {', '.join(map(str, seeds))} ({len(seeds)}); ± is the 95% Student-t interval over the seeds",
        f"- tuning: {'; '.join(tuning)}",
        *([f"- tuned values: {'; '.join(f'{m} {v}' for m, v in sorted(tuned.items()))}"] if tuned else []),
        f"- setting: {setting}",
        f"- {_hardware_line(runs)}; precision: {', '.join(sorted({r['tags'].get('precision', '?') for r in runs}))}",
        f"- evaluation: {tags.get('evaluation', 'all clients')}",
        *_code_line(runs),
    ]


def _hardware_line(runs: list[dict]) -> str:
    """The CPUs and GPUs the cells ran on, every one named: figures compare only within one CPU (docs/evidence.md)."""
    cpus = sorted({run["tags"].get("hardware.cpu", "unknown") for run in runs})
    gpus = sorted({run["tags"].get("hardware.gpu", "none") for run in runs})
    line = f"CPU: {' / '.join(cpus)}; GPU: {' / '.join(gpus)}"
    return line + (
        " (the cells ran on different machines: a figure compares only with one from the same CPU)"
        if len(cpus) > 1 or len(gpus) > 1
        else ""
    )


def _code_line(runs: list[dict]) -> list[str]:
    """The commits the cells ran at (``+dirty``: with uncommitted changes), as MLflow tagged them; a comparison
    resumed after the checkout moved on has several, which the line says."""
    commits = sorted(
        {
            tags[GIT_COMMIT][:7] + ("+dirty" if tags.get(GIT_DIRTY) == "true" else "")
            for tags in (run["tags"] for run in runs)
            if GIT_COMMIT in tags
        }
    )
    if not commits:
        return []
    several = " (the cells ran at different commits: compare figures across them only where the change left them)"
    return [f"- code: {', '.join(commits)}{several if len(commits) > 1 else ''}"]


def _selection_table(methods: list[str], by_method: dict[str, list[dict]]) -> str:
    """The :data:`SELECTION` diagnostics of the methods that log them (mean ± CI over seeds), then each paired with
    the first of those methods; or ''."""
    logged = [c for c in SELECTION if any(c[0] in r["metrics"] for m in methods for r in by_method[m])]
    selecting = [m for m in methods if any(key in r["metrics"] for key, *_ in logged for r in by_method[m])]
    if not selecting:
        return ""

    def values(method: str, key: str, scale: float) -> dict[int, float]:
        return finite({r["seed"]: scale * r["metrics"][key] for r in by_method[method] if key in r["metrics"]})

    def table(head: str, lines: dict[str, list[str]]) -> str:
        labels = " | ".join(label for _, label, *_ in logged)
        rows = [f"| {method} | " + " | ".join(cells) + " |" for method, cells in lines.items()]
        return "\n".join([f"| {head} | {labels} |", "|---" * (1 + len(logged)) + "|", *rows])

    first = selecting[0]
    means = {
        method: [
            _over(values(method, key, scale), seeds_of(by_method[method]), digits) for key, _, scale, digits in logged
        ]
        for method in selecting
    }
    pairs = {
        method: [
            _paired_cell(values(first, key, scale), values(method, key, scale), digits)
            for key, _, scale, digits in logged
        ]
        for method in selecting[1:]
    }
    paired_with = (
        f"\n\nPaired with {first} (over the seeds both logged):\n\n" + table(f"method - {first}", pairs)
        if pairs
        else ""
    )
    return (
        "\n## Group selection at the final evaluation (SGPT Table 4, Fig. 3, App. D.2)\n\n"
        "Every client's test rows, assigned to groups by the final keys"
        + (
            "; instability: the standard deviation of each client's share of rows per group over the second half of "
            "the evaluations, averaged over groups and the clients with test rows"
            if any(key == "selection_instability" for key, *_ in logged)
            else ""
        )
        + ".\n\n"
        + table("method", means)
        + paired_with
        + "\n"
    )


def tuning_seeds(runs: list[dict]) -> set[int]:
    """The seeds the cells' tuned values were chosen on: their :data:`TUNING_SEED` tag, or for a cell logged before
    that tag (2026-11-29) its :data:`TUNING` text (``... on seed S, ...``); empty where every cell ran at the
    presets."""
    seeds = set()
    for run in runs:
        tags = run["tags"]
        if TUNING_SEED in tags:
            seeds.add(int(tags[TUNING_SEED]))
        elif found := re.search(r" on seed (-?\d+),", tags.get(TUNING, "")):
            seeds.add(int(found.group(1)))
    return seeds


def _held_out_pairs(arranged: Arranged) -> str:
    """Tuned cells: the paired comparisons again without the seeds the values were chosen on, or '' (fewer than two
    other seeds). The tuning ranks its trials on the tuning seed's evaluation, which flatters the winner there (the
    winner's curse); the other seeds draw new partitions, initialisations and samplings."""
    chosen_on = tuning_seeds(arranged.runs)
    first, methods = arranged.methods[0], arranged.methods[1:]
    if not chosen_on or not methods or len({r["seed"] for r in arranged.runs} - chosen_on) < 2:
        return ""

    def held_out(method: str, column) -> dict[int, float]:
        return {seed: v for seed, v in arranged.values(method, column).items() if seed not in chosen_on}

    named = ", ".join(map(str, sorted(chosen_on)))
    return (
        f"\n## Paired with {first} without the tuning seed (all but seed {named})\n\n"
        f"The tuned values were picked on seed {named}'s evaluation, which flatters them there; the other seeds draw "
        "new partitions, initialisations and samplings. Where the trials were scored on the test rows (the tuning "
        "line says), the choice also rests on the test images, the same on every seed.\n\n"
        + "\n".join(_paired_table(arranged, held_out))
        + "\n"
    )


def _paired_table(arranged: Arranged, values) -> list[str]:
    """Every method but the first minus the first, paired over the seeds ``values(method, column)`` gives, in the
    sigmas and accuracies where they were logged: the table's lines."""
    first, columns = arranged.methods[0], arranged.paired_columns
    named = [f"{k} (last-10 mean{'; lower is fairer' if k.startswith('sigma') else ''})" for k, _ in columns]
    lines = [f"| method - {first} | " + " | ".join(named) + " |", "|---" * (1 + len(columns)) + "|"]
    for method in arranged.methods[1:]:
        row = [_paired_cell(values(first, column), values(method, column)) for column in columns]
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    return lines


class Arranged:
    """A comparison's finished cells by method, the methods in the order named (else as the comparison's own run
    names them, else sorted), and the summary columns any cell logged. ``only``: the (method, seed) cells to keep
    (``raysim compare``'s own report: what the command asked for, not every cell the experiment has held); all of
    them without it (``raysim report``)."""

    def __init__(
        self, uri: str, experiment: str, order: list[str] | None = None, only: set[tuple[str, int]] | None = None
    ):
        self.uri, self.experiment = uri, experiment
        self.runs = [run for run in cells(uri, experiment) if only is None or (run["method"], run["seed"]) in only]
        if not self.runs:
            asked = ", ".join(cell_label(m, s) for m, s in sorted(only or ()))
            raise ConfigError(f"experiment {experiment!r} has no finished cell of those asked for ({asked})")
        order = order or named_order(uri, experiment)
        self.by_method: dict[str, list[dict]] = defaultdict(list)
        for run in self.runs:
            self.by_method[run["method"]].append(run)
        self.methods = [m for m in order if m in self.by_method] + sorted(set(self.by_method) - set(order))
        self.columns = [c for c in (*STATISTICS, (BYTES, "mean")) if any(c in r["summary"] for r in self.runs)]
        self.paired_columns = [c for c in STATISTICS if c[1] == "mean" and c in self.columns]

    def values(self, method: str, column) -> dict[int, float]:
        """Each seed's ``column`` (a ``(metric, stat)`` of the cells' summaries) for ``method``, where a number."""
        return finite({r["seed"]: r["summary"][column] for r in self.by_method[method] if column in r["summary"]})

    def seeds(self, method: str) -> int:
        """How many seeds ``method`` has cells for."""
        return seeds_of(self.by_method[method])


def metric_segments(methods: list[str]) -> dict[str, str]:
    """Each method as a comparison names it (``sgpt:head_pooling=cls``), as MLflow allows in a metric's name
    (``sgpt_head_pooling_cls``); a name two methods would share gets their position too (``_2``, ``_3``)."""
    plain = {method: re.sub(r"[^\w.\- ]", "_", method) for method in methods}
    shared = {name for name in plain.values() if list(plain.values()).count(name) > 1}
    return {m: f"{plain[m]}_{i + 1}" if plain[m] in shared else plain[m] for i, m in enumerate(methods)}


def comparison_metrics(arranged: Arranged) -> dict[str, float]:
    """The report's figures as metrics of the comparison's own run: per method ``METHOD/<metric>_<stat>`` (the mean
    over seeds of the cells' ``summary/<metric>_<stat>``) and its ``_ci95`` (the half-width), then, paired with the
    first method, ``METHOD/<metric>_mean_vs_FIRST`` and its ``_ci95`` (a figure without seeds to rest on, NaN, is
    left out). ``METHOD`` is :func:`metric_segments`'s."""
    first, named = arranged.methods[0], metric_segments(arranged.methods)
    figures: dict[str, float] = {}

    def put(name: str, mean: float, half: float) -> None:
        figures.update({key: value for key, value in ((name, mean), (f"{name}_ci95", half)) if not np.isnan(value)})

    for method in arranged.methods:
        for key, stat in arranged.columns:
            put(f"{named[method]}/{key}_{stat}", *interval(list(arranged.values(method, (key, stat)).values())))
        for column in arranged.paired_columns if method != first else ():
            mean, half, _, _ = paired(arranged.values(first, column), arranged.values(method, column))
            put(f"{named[method]}/{column[0]}_mean_vs_{named[first]}", mean, half)
    return figures


def write_comparison(
    uri: str, experiment: str, folder: str | Path, order: list[str] | None = None
) -> tuple[str, list[Path]]:
    """:func:`write_arranged` of the store's cells; ``order``: as :class:`Arranged` takes it."""
    return write_arranged(Arranged(uri, experiment, order), folder)


def write_arranged(arranged: Arranged, folder: str | Path) -> tuple[str, list[Path]]:
    """``report.md`` (methods with CIs, paired comparisons with the first method) and the two Pareto figures (each
    where some method logged both its axes) under ``folder``; returns the methods' table and the paths."""
    uri, experiment = arranged.uri, arranged.experiment
    runs, by_method, methods, columns = arranged.runs, arranged.by_method, arranged.methods, arranged.columns
    values = arranged.values

    header = [f"{k} ({'last-10 mean' if s == 'mean' and k != BYTES else s})" for k, s in columns]
    lines = ["| method | seeds | trainable params | " + " | ".join(header) + " |", "|---" * (3 + len(columns)) + "|"]
    for method in methods:
        trainable = {r["metrics"].get(TRAINABLE) for r in by_method[method]} - {None}
        shown = f"{int(max(trainable)):,}" if trainable else ""
        seeds = arranged.seeds(method)
        figures = [_over(values(method, c), seeds, 0 if c[0] == BYTES else 2) for c in columns]
        lines.append(f"| {method} | {seeds} | {shown} | " + " | ".join(figures) + " |")
    table = "\n".join(lines)
    first = methods[0]
    pairs = _paired_table(arranged, values)
    selection = _selection_table(methods, by_method)
    held_out = _held_out_pairs(arranged)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "report.md"]
    paths[0].write_text(
        f"# {experiment}: {len(methods)} methods x {len({r['seed'] for r in runs})} seeds ({uri})\n\n"
        + "\n".join(_described(runs))
        + f"\n\n{table}\n\n## Paired with {first} (over the seeds both ran)\n\n"
        + "\n".join(pairs)
        + "\n"
        + held_out
        + selection
    )
    accuracy = ("global_acc", "mean")
    fairness = ("sigma_type", "mean") if ("sigma_type", "mean") in columns else ("sigma_client", "mean")
    for name, x, label, log in (
        ("accuracy_vs_fairness.png", fairness, f"{fairness[0]} (pp, last-10 mean; lower is fairer)", False),
        ("accuracy_vs_bytes.png", (BYTES, "mean"), "bytes per round (down + up)", True),
    ):
        points = {
            m: (*interval(list(values(m, x).values())), *interval(list(values(m, accuracy).values()))) for m in methods
        }
        drawn = {m: (p[0], p[2]) for m, p in points.items() if not (np.isnan(p[0]) or np.isnan(p[2]))}
        if drawn:  # no method logged both figures: no empty axes
            paths.append(folder / name)
            plot_tradeoff(
                points, pareto_front(drawn), label, f"{experiment}\nglobal accuracy vs {x[0]}", paths[-1], log
            )
    timed = {r["id"]: r["timed_curve"] for r in runs if "timed_curve" in r}
    if timed:
        paths.append(folder / "time_to_accuracy.png")
        groups = {r["id"]: r["method"] for r in runs}
        title = f"{experiment}: time to accuracy (one line per seed)"
        plot_compared_curves(timed, groups, title, paths[-1], x_label="virtual time (s)")
    return table, paths
