"""Plots that compare: every accuracy axis spans 0-100 %, and rounds, clients and groups get whole-number ticks,
in a run's artifacts and in ``raysim report`` alike."""

from __future__ import annotations

import pytest

from raysim.tracking import plots

HISTORY = [{"round": r, "global_acc": 5.0 + r, "local_acc": 4.0 + r, "worst_local_acc": 1.0} for r in (1, 2, 3)]
DRAWINGS = {
    "curves": lambda path: plots.plot_accuracy_curves(HISTORY, "t", path),
    "clients": lambda path: plots.plot_client_accuracy({0: 3.0, 1: 9.0, 2: 12.0}, "t", path),
    "compared": lambda path: plots.plot_compared_curves(
        {"a": ([1, 2, 3], [1.0, 2.0, 3.0]), "b": ([1, 2], [4.0, 5.0])}, {"a": "fedvpt", "b": "sgpt"}, "t", path
    ),
    "global_vs_worst": lambda path: plots.plot_global_vs_worst({"fedvpt": (10.0, 2.0)}, "t", path),
    "selection_map": lambda path: plots.plot_selection_map([[1, 2, 0], [0, 1, 3]], "t", path),
}
ACCURACY_AXES = {"curves": "y", "clients": "y", "compared": "y", "global_vs_worst": "xy"}
INTEGER_AXES = {"curves": "x", "clients": "x", "compared": "x", "selection_map": "xy"}


@pytest.mark.parametrize("drawing", list(DRAWINGS))
def test_accuracy_axes_span_0_to_100_and_counts_have_whole_ticks(drawing, tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)  # keep the figure to look at it
    DRAWINGS[drawing](tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0
    (ax, *_) = figures[0].axes
    for axis in ACCURACY_AXES.get(drawing, ""):
        assert getattr(ax, f"get_{axis}lim")() == (0, 100), axis
    for axis in INTEGER_AXES.get(drawing, ""):
        ticks = getattr(ax, f"get_{axis}ticks")()
        assert len(ticks) and all(float(t).is_integer() for t in ticks), (axis, ticks)


@pytest.mark.parametrize(
    "x, label",
    [
        ("bytes_down_total", "bytes downloaded so far"),
        ("bytes_up_total", "bytes uploaded so far"),
        ("sim_time_s", "virtual time (s)"),
    ],
)
def test_the_curves_name_what_they_are_drawn_against(x, label, tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    history = [{**h, x: 1000.0 * h["round"]} for h in HISTORY]
    plots.plot_accuracy_curves(history, "t", tmp_path / "plot.png", x=x)
    assert figures[0].axes[0].get_xlabel() == label


def test_a_run_evaluated_once_shows_and_groups_past_ten_get_colours_of_their_own(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    curves = {f"run{i}": ([3], [10.0 + i]) for i in range(12)}  # one evaluation each
    plots.plot_compared_curves(curves, {run: run for run in curves}, "t", tmp_path / "plot.png")
    lines = figures[0].axes[0].get_lines()
    assert len(lines) == 12 and all(line.get_marker() == "o" for line in lines)
    assert (
        len({line.get_color() if isinstance(line.get_color(), str) else tuple(line.get_color()) for line in lines})
        == 12
    )
