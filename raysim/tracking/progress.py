"""What the user sees while and after a run: a progress bar per round and the final table (rich)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

SHOWN = (
    ("global_acc", "global"),
    ("local_acc", "local"),
    ("worst_local_acc", "worst"),
    ("sigma_type", "sigma_type"),
    ("unseen_acc", "unseen"),
    ("train_loss", "loss"),
)


def format_metrics(metrics: dict[str, float]) -> str:
    """``global 81.2 | local 79.0 | worst 40.0 | loss 0.61 | 1.2 MB | epsilon 2.1`` from whatever keys are present
    (MB: the round's bytes up and down; epsilon: the privacy budget spent so far; staleness: asynchronous mode's mean
    staleness of the version's updates)."""
    parts = [
        f"{label} {metrics[key]:.4g}" if key == "train_loss" else f"{label} {metrics[key]:.1f}"
        for key, label in SHOWN
        if key in metrics
    ]
    if "bytes_up" in metrics and "bytes_down" in metrics:
        parts.append(f"{(metrics['bytes_up'] + metrics['bytes_down']) / 1e6:.3g} MB")
    if "privacy_epsilon" in metrics:
        parts.append(f"epsilon {metrics['privacy_epsilon']:.3g}")
    if "staleness_mean" in metrics:
        parts.append(f"staleness {metrics['staleness_mean']:.2g}")
    if metrics.get("secagg_lost"):
        parts.append("lost: too few survivors for the secure sum")
    return " | ".join(parts)


class RoundProgress:
    """A progress bar over rounds whose text shows the latest metrics; in a pipe or a file (not a terminal), one plain
    line per evaluated round instead, so nothing is redrawn or cut to the console's width."""

    def __init__(self, rounds: int, headline: str, enabled: bool = True, console: Console | None = None, done: int = 0):
        """``done``: rounds already run (a resumed run's bar starts there)."""
        self.console = console or Console(file=sys.stderr)
        self.enabled, self.rounds, self.headline, self.done = enabled, rounds, headline, done
        self.latest: dict[str, float] = {}
        self.progress = Progress(
            TextColumn("round"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            disable=not (enabled and self.console.is_terminal),
        )

    def __enter__(self):
        if self.enabled:
            self.console.print(self.headline, highlight=False, soft_wrap=True)
        self.progress.__enter__()
        self.task = self.progress.add_task("", total=self.rounds, completed=self.done)
        return self

    def advance(self, round: int, metrics: dict[str, float]) -> None:
        self.latest.update(metrics)
        text = format_metrics(self.latest)
        self.progress.update(self.task, completed=round, description=text)
        if self.enabled and not self.console.is_terminal and "global_acc" in metrics:
            self.console.print(f"round {round}/{self.rounds}: {text}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        """A line above the bar (e.g. what a Ctrl-C will do)."""
        self.console.print(text, highlight=False, soft_wrap=True)

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)


def print_summary(
    summary: dict[str, dict[str, float]],
    run_id: str,
    config,
    console: Console | None = None,
    history: list[dict[str, float]] = (),
) -> None:
    """The papers' protocol: final value, and mean / variance over the last 10 evaluated rounds; then the mean
    communication per round over ``history``."""
    console = console or Console()
    table = Table(title=f"{config.method}: accuracy (%)")
    for column in ("metric", "final", "mean (last 10)", "var (last 10)"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key, stats in summary.items():
        table.add_row(key, f"{stats['final']:.2f}", f"{stats['mean']:.2f}", f"{stats['var']:.3f}")
    console.print(table)
    up = [h["bytes_up"] for h in history if "bytes_up" in h]
    down = [h["bytes_down"] for h in history if "bytes_down" in h]
    if up and down:
        console.print(
            f"communication (MB = 10^6 bytes): {sum(up) / len(up) / 1e6:.3g} MB up, "
            f"{sum(down) / len(down) / 1e6:.3g} MB down per round (mean); {sum(up) / 1e6:.3g} MB up, "
            f"{sum(down) / 1e6:.3g} MB down in all",
            highlight=False,
            soft_wrap=True,
        )
    if history and "privacy_epsilon" in history[-1]:
        p = config.privacy
        console.print(
            f"privacy ({p.mode}-level DP): epsilon {history[-1]['privacy_epsilon']:.4g} spent at delta {p.delta:g}",
            highlight=False,
        )
    name = config.tracking.run_name  # None in a checkpoint written before runs were named this way
    console.print(
        f"MLflow run {f'{name} ({run_id})' if name else run_id} in {config.tracking.resolved_uri} "
        f"(experiment {config.tracking.experiment!r})",
        highlight=False,
        soft_wrap=True,
    )
