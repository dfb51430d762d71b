"""The statistics of a comparison over seeds against hand-computed values: the 95% Student-t interval, the paired
difference with its sign agreement (a float-rounding difference is a tie), and the Pareto front."""

from __future__ import annotations

import math

import pytest

from raysim.tracking.statistics import interval, paired, pareto_front

T_975_2DF = 4.302652729911275  # the 97.5% quantile of Student's t with 2 degrees of freedom (tables)


def test_interval_is_the_mean_and_the_student_t_half_width():
    mean, half = interval([1.0, 2.0, 3.0])  # sd 1, n 3
    assert mean == 2.0 and half == pytest.approx(T_975_2DF / math.sqrt(3))


def test_interval_of_one_value_has_no_width():
    mean, half = interval([7.5])
    assert mean == 7.5 and math.isnan(half)


def test_paired_differences_are_taken_seed_by_seed_over_the_shared_seeds():
    first = {0: 1.0, 1: 2.0, 2: 3.0, 3: 9.0}  # seed 3 has no partner: left out
    other = {0: 2.0, 1: 4.0, 2: 3.0}  # differences 1, 2, 0: mean 1, sd 1
    mean, half, agree, seeds = paired(first, other)
    assert (mean, agree, seeds) == (1.0, 2, 3) and half == pytest.approx(T_975_2DF / math.sqrt(3))


def test_paired_sign_agreement_counts_the_seeds_on_the_side_of_the_mean():
    mean, _, agree, seeds = paired({0: 5.0, 1: 5.0, 2: 5.0}, {0: 1.0, 1: 2.0, 2: 6.0})  # -4, -3, +1
    assert (mean, agree, seeds) == (-2.0, 2, 3)


def test_a_difference_within_float_rounding_of_0_is_a_tie_not_a_side():
    mean, _, agree, seeds = paired({0: 10.1, 1: 20.2, 2: 30.3}, {0: 10.2, 1: 20.1, 2: 30.3})  # +0.1, -0.1, 0
    assert mean != 0 and abs(mean) < 1e-12 and (agree, seeds) == (0, 3)  # the mean is rounding: no side to agree on
    _, _, agree, _ = paired({0: 1.0, 1: 2.0, 2: 0.3}, {0: 2.0, 1: 3.0, 2: 0.1 + 0.2})  # 1, 1 and +5.6e-17
    assert agree == 2


def test_pareto_front_keeps_the_points_no_other_beats_on_both_axes():
    points = {"a": (1.0, 50.0), "b": (2.0, 60.0), "c": (3.0, 55.0), "d": (0.5, 40.0)}  # c: b is cheaper and better
    assert pareto_front(points) == ["d", "a", "b"]
