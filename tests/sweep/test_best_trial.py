"""How a sweep (and a comparison's tuning) picks its best trial: by the mean of the metric over its last 10
evaluated rounds, among the trials that ran every round; hand-computed on Ray Tune results built from their
per-round frames."""

from __future__ import annotations

import pandas as pd
from ray.tune import Result

from raysim.sweep.tune import best_trial, last_ten_mean

ROUNDS = 12


def _trial(number: int, rounds: list[int], values: list[float]) -> Result:
    frame = pd.DataFrame({"round": rounds, "global_acc": values})
    metrics = {"global_acc": values[-1], "round": rounds[-1], "trial_id": f"abc_{number - 1:05d}"}
    return Result(metrics=metrics, checkpoint=None, error=None, path=f"trial{number}", metrics_dataframe=frame)


# A: best final round (50) and best mean of all 12 rounds (320/12), but last-10 mean (9 x 10 + 50) / 10 = 14
A = _trial(1, list(range(1, 13)), [90, 90] + [10] * 9 + [50])
# B: last-10 mean (9 x 20 + 30) / 10 = 21; resumed from round 10's checkpoint, so round 11 is reported twice (0, then
# 20): counted once, as last reported (else the last ten rows would average 19)
B = _trial(2, list(range(1, 12)) + [11, 12], [0, 0] + [20] * 8 + [0] + [20, 30])
# C: stopped by the scheduler at round 5, whatever its accuracy
C = _trial(3, [1, 2, 3, 4, 5], [99] * 5)


def test_the_last_ten_evaluations_rank_not_the_final_round():
    assert last_ten_mean(A, "global_acc") == 14.0
    assert last_ten_mean(B, "global_acc") == 21.0
    assert best_trial([A, B, C], "global_acc", "max", ROUNDS) is B
    assert best_trial([A, B, C], "global_acc", "min", ROUNDS) is A


def test_only_trials_that_ran_every_round_and_ties_go_to_the_first():
    assert best_trial([C], "global_acc", "max", ROUNDS) is None
    twin = _trial(4, list(range(1, 13)), [0, 0] + [20] * 9 + [30])  # B's last-10 mean, later trial
    assert best_trial([twin, B], "global_acc", "max", ROUNDS) is B


def test_asha_stops_trials_at_its_rungs_below_the_last_round_and_never_at_it():
    """Over 8 rounds ASHA's rungs fall at 2 and 8 (its first at a quarter of the rounds, then 4 times that): the
    trailing trials stop at round 2, and at round 8, the last, none does (its run then logs its summary)."""
    from types import SimpleNamespace

    from raysim.sweep.tune import RunsTheLastRound

    scheduler = RunsTheLastRound(rounds=8)
    scheduler.set_search_properties("global_acc", "max")
    trials = [SimpleNamespace(trial_id=f"t{i}") for i in range(8)]
    for trial in trials:
        scheduler.on_trial_add(None, trial)

    def actions(round):
        return [
            scheduler.on_trial_result(None, t, {"round": round, "global_acc": -float(i)}) for i, t in enumerate(trials)
        ]

    assert "STOP" in actions(2)  # each worse than those before it: below the top quarter of the rung
    assert set(actions(8)) == {"CONTINUE"}  # the last round: every trial that got there runs to its end
