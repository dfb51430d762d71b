"""The round's line: the metrics a user watches, the privacy budget spent and a secure round lost, in one line."""

from __future__ import annotations

import io

from rich.console import Console

from raysim.tracking.progress import RoundProgress, format_metrics


def test_the_line_shows_the_budget_spent_and_a_lost_secure_round():
    metrics = {"global_acc": 81.23, "train_loss": 0.6123, "bytes_up": 6e5, "bytes_down": 6e5, "privacy_epsilon": 2.345}
    assert format_metrics(metrics) == "global 81.2 | loss 0.6123 | 1.2 MB | epsilon 2.35"
    assert format_metrics({"secagg_lost": 1.0}) == "lost: too few survivors for the secure sum"
    assert format_metrics({"secagg_lost": 0.0}) == ""


def test_a_long_line_is_not_wrapped_in_a_pipe():
    out = io.StringIO()
    with RoundProgress(3, "headline", console=Console(file=out, width=40)) as progress:
        progress.advance(1, {"global_acc": 1.0, "local_acc": 2.0, "worst_local_acc": 0.0, "privacy_epsilon": 3.0})
    lines = [line for line in out.getvalue().splitlines() if line.startswith("round 1/3")]
    assert lines == ["round 1/3: global 1.0 | local 2.0 | worst 0.0 | epsilon 3"]
