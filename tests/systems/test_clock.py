"""The virtual clock's arithmetic against hand-computed values: completion times, a straggler's work by the
deadline, and how a round settles under each straggler policy, with over-selection and dropouts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from raysim.core.training import within_work
from raysim.systems.clock import finish_times, settle, work_by_deadline

INF = np.inf


def test_finish_is_download_plus_compute_plus_upload():
    finish = finish_times(
        bytes_down=np.array([1000.0, 2000.0]),
        samples=np.array([30.0, 60.0]),
        bytes_up=np.array([500.0, 500.0]),
        speed=np.array([10.0, 20.0]),
        downlink=np.array([100.0, 1000.0]),
        uplink=np.array([50.0, INF]),
    )
    assert finish.tolist() == [10.0 + 3.0 + 10.0, 2.0 + 3.0 + 0.0]


def test_unset_devices_cost_no_time():
    assert finish_times(*(np.array([5.0]),) * 3, *(np.array([INF]),) * 3).tolist() == [0.0]


def test_work_by_deadline_is_the_share_of_samples_that_fits():
    # (10 - 2) s x 2 samples/s = 16 of 40 samples; communication alone misses the deadline: 0; no samples: all of it
    work = work_by_deadline(10.0, np.array([2.0, 12.0, 4.0]), np.array([40.0, 10.0, 0.0]), np.array([2.0, 5.0, 1.0]))
    assert work.tolist() == [0.4, 0.0, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0 x inf on the way
        unlimited = work_by_deadline(10.0, np.array([12.0, 10.0, 5.0]), np.array([4.0, 4.0, 4.0]), np.full(3, INF))
    assert unlimited.tolist() == [0.0, 0.0, 1.0]  # at infinite speed, no time left is still no work


def test_within_work_keeps_the_longest_prefix_within_the_budget():
    plan = [[np.arange(4), np.arange(4), np.arange(2)], [np.arange(4), np.arange(4), np.arange(2)]]  # 20 samples
    assert [(e, len(r)) for e, r in within_work(plan, 0.5)] == [(0, 4), (0, 4), (0, 2)]  # 10 of 20
    assert len(within_work(plan, 0.35)) == 1  # 7 samples: one batch of 4 fits, the next would make 8
    assert len(within_work(plan, 0.1)) == 0
    assert len(within_work(plan, 1.0)) == 6
    # one batch of 16 of 49 rows in exactly the time left: its share, 16 / 49, times 49 is 15.999... in floats
    share = work_by_deadline(1.0, np.zeros(1), np.array([49.0]), np.array([16.0]))[0]
    assert [len(r) for _, r in within_work([[np.arange(16), np.arange(16), np.arange(16), np.arange(1)]], share)] == [
        16
    ]


CLIENTS, FINISH = [1, 2, 3, 4], np.array([3.0, 9.0, 5.0, 12.0])
LATE = FINISH > 10.0  # client 4 misses a 10 s deadline


def test_drop_keeps_those_on_time_and_waits_for_the_deadline_when_short():
    full = settle(CLIENTS, FINISH, ~LATE, m=3, deadline=10.0)
    assert (full.kept, full.over_selected, full.duration) == ([1, 2, 3], [], 9.0)  # 3 in time: closes at the 3rd
    short = settle(CLIENTS, FINISH, ~LATE, m=4, deadline=10.0)
    assert (short.kept, short.duration) == ([1, 2, 3], 10.0)  # one short: the server waited for the deadline


def test_wait_keeps_the_straggler_and_waits_for_it():
    result = settle(CLIENTS, FINISH, np.ones(4, dtype=bool), m=4, deadline=10.0)
    assert (result.kept, result.duration) == ([1, 2, 3, 4], 12.0)


def test_partial_keeps_the_straggler_cut_at_the_deadline():
    cut = FINISH.copy()
    cut[3] = 9.5  # client 4's work by the deadline arrives at 9.5 s
    result = settle(CLIENTS, cut, np.ones(4, dtype=bool), m=4, deadline=10.0)
    assert (result.kept, result.duration) == ([1, 2, 3, 4], 9.5)


def test_over_selection_keeps_the_first_m_to_finish_ties_by_client():
    result = settle([1, 2, 3, 4, 5], np.array([4.0, 2.0, 2.0, 7.0, 1.0]), np.ones(5, dtype=bool), m=3, deadline=0.0)
    assert (result.kept, result.over_selected, result.duration) == ([2, 3, 5], [1, 4], 2.0)


@pytest.mark.parametrize("deadline, duration", [(10.0, 10.0), (0.0, 4.0)])
def test_a_dropout_makes_a_short_round_wait_for_the_deadline_if_there_is_one(deadline, duration):
    result = settle([1, 2], np.array([3.0, 4.0]), np.ones(2, dtype=bool), m=3, deadline=deadline, missing=1)
    assert (result.kept, result.duration) == ([1, 2], duration)


def test_a_short_round_waits_for_a_straggler_it_keeps_past_the_deadline():
    result = settle(CLIENTS, FINISH, np.ones(4, dtype=bool), m=5, deadline=10.0, missing=1)  # wait, one dropout
    assert (result.kept, result.duration) == ([1, 2, 3, 4], 12.0)  # client 4's update lands at 12 s


def test_a_round_nobody_reports_to():
    assert settle([], np.zeros(0), np.zeros(0, dtype=bool), m=2, deadline=5.0, missing=2).duration == 5.0
    assert settle([], np.zeros(0), np.zeros(0, dtype=bool), m=2, deadline=0.0).duration == 0.0


@pytest.mark.parametrize("lost_until, duration", [(6.0, 6.0), (2.5, 4.0)])
def test_without_a_deadline_a_short_round_lasts_until_its_last_dropout_left(lost_until, duration):
    """Two updates land at 3 and 4 s; the third client's device went offline at ``lost_until``: until then the server
    waits for it. A round every client of which went offline mid-round so lasts too (the clock moves on)."""
    result = settle(
        [1, 2], np.array([3.0, 4.0]), np.ones(2, dtype=bool), m=3, deadline=0.0, missing=1, lost_until=lost_until
    )
    assert (result.kept, result.duration) == ([1, 2], duration)
    assert (
        settle([], np.zeros(0), np.zeros(0, dtype=bool), m=2, deadline=0.0, missing=2, lost_until=7.5).duration == 7.5
    )
