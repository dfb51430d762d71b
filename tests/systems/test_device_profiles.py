"""Client devices: distributions drawn from the run seed, trace files (CSV, parquet, the shipped example, FedScale's
converted), online intervals, and the one-line errors of a bad trace or setting."""

from __future__ import annotations

import importlib.util
import pickle
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.systems import fedscale
from raysim.systems.profiles import draw_profiles
from raysim.systems.traces import resolve

ROOT = Path(__file__).resolve().parents[2]


def systems(**values):
    return build_config("fedvpt", [{"systems": values}]).systems


def test_draws_follow_the_run_seed_and_one_field_never_moves_another():
    a = draw_profiles(systems(speed="lognormal:3,0.5"), 50, seed=7)
    b = draw_profiles(systems(speed="lognormal:3,0.5", uplink="uniform:1e5,1e6"), 50, seed=7)
    c = draw_profiles(systems(speed="lognormal:3,0.5"), 50, seed=8)
    assert np.array_equal(a.speed, b.speed) and not np.array_equal(a.speed, c.speed)
    assert np.isinf(a.uplink).all() and ((b.uplink >= 1e5) & (b.uplink <= 1e6)).all()
    assert draw_profiles(systems(downlink="250"), 3, seed=0).downlink.tolist() == [250.0] * 3


@pytest.mark.parametrize(
    "text, says",
    [
        ("lognormal:0", "takes 2 numbers"),
        ("gamma:1,2", "unknown distribution 'gamma'; valid: uniform, lognormal"),
        ("-3", "is not a positive number"),
        ("uniform:5,1", "0 < LOW <= HIGH"),
        ("fast", "is not a positive number"),
    ],
)
def test_bad_distributions_say_what_is_wrong(text, says):
    with pytest.raises(ConfigError, match=says):
        systems(speed=text)


def write(tmp_path, rows, name="trace.csv"):
    path = tmp_path / name
    frame = pd.DataFrame(rows)
    frame.to_parquet(path, index=False) if name.endswith(".parquet") else frame.to_csv(path, index=False)
    return str(path)


@pytest.mark.parametrize("name", ["trace.csv", "trace.parquet"])
def test_a_trace_gives_listed_clients_their_rows_and_the_rest_the_rows_in_turn(tmp_path, name):
    path = write(tmp_path, {"client": [2, 0], "speed": [20.0, 10.0], "uplink": [5.0, 6.0]}, name)
    profiles = draw_profiles(systems(trace=path, downlink="7"), 4, seed=0)
    # rows in client order: 0 -> (10, 6), 2 -> (20, 5); client 1 takes row 1 % 2 = 1, client 3 row 3 % 2 = 1
    assert profiles.speed.tolist() == [10.0, 20.0, 20.0, 20.0]
    assert profiles.uplink.tolist() == [6.0, 5.0, 5.0, 5.0]
    assert profiles.downlink.tolist() == [7.0] * 4  # not in the trace: the distribution's
    assert np.isinf(profiles.online_left(123.0)).all()


def test_online_intervals_repeat_with_the_period_and_join_across_its_end(tmp_path):
    path = write(tmp_path, {"client": [0, 1], "period_s": [40, 40], "online": ["0-10 20-30", "0-10 30-40"]})
    profiles = draw_profiles(systems(trace=path), 2, seed=0)
    assert profiles.online_left(5.0).tolist() == [5.0, 5.0]
    assert profiles.online_left(15.0).tolist() == [0.0, 0.0]
    assert profiles.online_left(45.0).tolist() == [5.0, 5.0]  # the next period
    assert profiles.online_left(35.0).tolist() == [0.0, 5.0 + 10.0]  # 30-40 runs on into 0-10
    assert profiles.next_online(12.0) == 8.0  # client 0's 20-30
    assert profiles.next_online(12.0, [1]) == 18.0  # client 1's: 30-40


def test_intervals_that_touch_or_overlap_are_one_and_the_whole_period_is_always(tmp_path):
    rows = {
        "client": [0, 1, 2, 3],
        "period_s": [1800, 1800, 1800, 1800],
        "online": ["0-1800", "0-600 600-1800", "100-500 300-900", "1200-1800 0-600"],
    }
    profiles = draw_profiles(systems(trace=write(tmp_path, rows)), 4, seed=0)
    assert profiles.online_left(500.0).tolist() == [np.inf, np.inf, 400.0, 100.0]
    assert profiles.online_left(1700.0).tolist() == [np.inf, np.inf, 0.0, 100.0 + 600.0]  # 1200-1800 runs into 0-600


def test_a_null_parquet_cell_is_an_empty_csv_cell(tmp_path):
    rows = {
        "client": [0, 1],
        "speed": [5.0, None],
        "tier": ["head", None],
        "online": [None, "0-10"],
        "period_s": [20, 20],
    }
    from_parquet = draw_profiles(systems(trace=write(tmp_path, rows, "t.parquet")), 2, seed=0)
    as_text = {**rows, "speed": ["5.0", ""], "tier": ["head", ""], "online": ["", "0-10"]}
    from_csv = draw_profiles(systems(trace=write(tmp_path, as_text, "t.csv")), 2, seed=0)
    assert from_parquet.speed.tolist() == from_csv.speed.tolist() == [5.0, np.inf]
    assert from_parquet.tier.tolist() == from_csv.tier.tolist() == ["head", "all"]


@pytest.mark.parametrize(
    "rows, says",
    [
        ({"client": [0, 7]}, "references client 7; the run has 4 clients"),
        ({"client": [0, 0]}, "lists a client twice"),
        ({"client": [0], "cpu": [1.0]}, "unknown columns cpu; valid columns: client, speed"),
        ({"speed": [1.0]}, "no client column"),
        ({"client": [0], "speed": [-1.0]}, "column speed must hold positive numbers"),
        ({"client": [0], "online": ["5-3"]}, "online interval '5-3' must look like START-END"),
        ({"client": [0], "period_s": [10], "online": ["0-20"]}, "ends after period_s"),
        ({"client": [0], "online": ["0-20"]}, "client 0 has online intervals but no period_s"),
        ({"client": [0.5]}, "column client must hold whole numbers"),
    ],
)
def test_bad_traces_say_what_is_wrong(tmp_path, rows, says):
    with pytest.raises(ConfigError, match=says):
        draw_profiles(systems(trace=write(tmp_path, rows)), 4, seed=0)


def test_a_missing_trace_is_refused_when_configured(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; pass a CSV or parquet file .* or a shipped trace: example"):
        systems(trace=str(tmp_path / "nope.csv"))


def test_the_shipped_example_is_what_its_script_generates():
    spec = importlib.util.spec_from_file_location("make_example_trace", ROOT / "bench" / "make_example_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = pd.read_csv(resolve("example"), keep_default_na=False)
    pd.testing.assert_frame_equal(shipped, module.example_trace(), check_dtype=False)
    profiles = draw_profiles(systems(trace="example"), 100, seed=0)
    assert 0 < (profiles.online_left(0.0) > 0).sum() < 100  # some clients are offline at the start
    assert np.array_equal(profiles.speed[:10], profiles.speed[10:20])  # any population takes the 10 devices in turn


def test_a_fedscale_trace_converts_and_loads(tmp_path):
    capacity = {5: {"computation": 100.0, "communication": 8000.0}, 9: {"computation": 50.0, "communication": 800.0}}
    behaviour = {
        5: {"active": [0, 50], "inactive": [30, 90], "finish_time": 100, "duration": 100},
        9: {"active": [10], "inactive": [60], "finish_time": 80, "duration": 80},
        11: {"active": [0], "inactive": [1], "finish_time": 2, "duration": 2},  # no capacity: left out
    }
    for name, value in (("cap", capacity), ("beh", behaviour)):
        (tmp_path / name).write_bytes(pickle.dumps(value))
    out = tmp_path / "fedscale.csv"
    assert fedscale.main([str(tmp_path / "cap"), str(tmp_path / "beh"), str(out)]) == 0
    profiles = draw_profiles(systems(trace=str(out)), 2, seed=0)
    assert profiles.speed.tolist() == pytest.approx([1000 / 300, 1000 / 150])  # 3x the inference ms per sample
    # kbit/s -> bytes/s as FedScale counts them: a model of B bytes is B / 1024 * 8 kbits
    assert profiles.uplink.tolist() == [1_024_000.0, 102_400.0] and profiles.downlink.tolist() == [
        1_024_000.0,
        102_400.0,
    ]
    assert profiles.online_left(20.0).tolist() == [10.0, 40.0]
    assert profiles.online_left(140.0).tolist() == [0.0, 0.0]  # 140 % 100 = 40 (off), 140 % 80 = 60 (off)


def test_a_fedscale_client_never_active_before_its_traces_end_is_left_out():
    """Its spans all start at or after ``finish_time``: an empty ``online`` cell would read as always online."""
    capacity = {1: {"computation": 10.0, "communication": 100.0}, 2: {"computation": 20.0, "communication": 100.0}}
    behaviour = {
        1: {"active": [20], "inactive": [30], "finish_time": 10},
        2: {"active": [0], "inactive": [5], "finish_time": 10},
    }
    table = fedscale.convert(capacity, behaviour)
    assert table.client.tolist() == [0] and table.online.tolist() == ["0.0-5.0"] and table.speed[0] == 1000 / 60


def test_fedscale_interval_times_are_converted_exactly(tmp_path):
    capacity = {1: {"computation": 10.0, "communication": 100.0}}
    behaviour = {1: {"active": [0.5, 1234567], "inactive": [12345.67, 1700001.25], "finish_time": 1700001.0}}
    table = fedscale.convert(capacity, behaviour)
    assert table.online[0] == "0.5-12345.67 1234567.0-1700001.0"  # exact, the last end clipped to finish_time
    path = tmp_path / "fs.csv"
    table.to_csv(path, index=False)
    assert draw_profiles(systems(trace=str(path)), 1, seed=0).online_left(1234568.0).tolist() == [1700001.0 - 1234568.0]
    tiny = fedscale.convert(capacity, {1: {"active": [5e-05], "inactive": [50.0], "finish_time": 60.0}})
    assert tiny.online[0] == "0.00005-50.0"  # no exponent, which the trace reader would take for a bad interval
    tiny.to_csv(path, index=False)
    assert draw_profiles(systems(trace=str(path)), 1, seed=0).online_left(1.0).tolist() == [49.0]


@pytest.mark.parametrize(
    "capacity, options, said",
    [
        ({1: {"computation": 0.0, "communication": 1.0}}, [], "client 1's computation is 0.0, not a latency > 0 ms"),
        ({1: {"computation": 1.0, "communication": 0}}, [], "client 1's communication is 0, not a rate > 0 kbit/s"),
        ({1: {"computation": 1.0, "communication": 1.0}}, ["--clients", "0"], "--clients 0 must be at least 1"),
    ],
)
def test_the_fedscale_converter_refuses_what_it_cannot_convert_in_one_line(tmp_path, capsys, capacity, options, said):
    (tmp_path / "cap").write_bytes(pickle.dumps(capacity))
    (tmp_path / "beh").write_bytes(pickle.dumps({1: {"active": [0], "inactive": [5], "finish_time": 10}}))
    try:
        code = fedscale.main([str(tmp_path / "cap"), str(tmp_path / "beh"), str(tmp_path / "out.csv"), *options])
    except SystemExit as exit:  # argparse's own usage errors
        code = exit.code
    assert code == 2 and said in capsys.readouterr().err and not (tmp_path / "out.csv").exists()


def test_the_fedscale_converter_refuses_pickled_code(tmp_path, capsys):
    (tmp_path / "cap").write_bytes(pickle.dumps(OrderedDict(a=1)))  # any class, harmless or not, is refused
    (tmp_path / "beh").write_bytes(pickle.dumps({}))
    assert fedscale.main([str(tmp_path / "cap"), str(tmp_path / "beh"), str(tmp_path / "out.csv")]) == 2
    assert "refusing collections.OrderedDict" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_a_server_with_no_client_online_waits_for_one_it_could_select(tmp_path):
    """Client 1 is held out (it never trains): its intervals do not end the server's wait, client 0's does."""
    from raysim.engine.devices import Devices

    rows = {"client": [0, 1], "period_s": [1800, 1800], "online": ["1000-1100", "100-200 300-400"]}
    config = build_config("fedvpt", [{"systems": {"trace": write(tmp_path, rows)}, "federation": {"clients": 2}}])
    devices = Devices(config, draw_profiles(config.systems, 2, seed=0))
    assert devices.select(1, 0.0, seen=[0]) == ([], 1000.0)
    assert devices.select(2, 1000.0, seen=[0]) == ([0], 0.0)


def test_the_clock_advanced_by_the_wait_finds_the_client_online_whatever_its_rounding():
    """``now + next_online(now)`` lands a few units in the last place below the opening as often as not (at 729,821 s,
    1.9e-11 s below 821.48 s; an opening at 0 just below the period's end): the client is online there, never
    offline with a wait too small to move the clock."""
    from raysim.systems.profiles import Profiles

    draws = np.random.default_rng(0)
    for _ in range(500):
        period = float(draws.uniform(60, 86_400))
        start = float(draws.uniform(0, period / 2)) if draws.random() < 0.5 else 0.0  # 0: the clock wraps to it
        profiles = Profiles(
            *np.ones((3, 1)), period=np.array([period]), owner=np.array([0]), start=np.array([start]),
            end=np.array([start + period / 4]), tier=np.array(["all"], dtype=object),
        )  # fmt: skip
        now = float(draws.uniform(0, 1e7))
        if profiles.online_left(now)[0] > 0:
            continue
        now += profiles.next_online(now)
        assert profiles.online_left(now)[0] > 0, (period, start, now)


@pytest.mark.parametrize(
    "stragglers, online, kept, late, dropouts",
    [
        ("partial", "0-25", [0], 1.0, 0.0),
        ("partial", "0-19.5", [0], 1.0, 0.0),  # offline before the deadline, after its cut update arrived (18 s)
        ("partial", "0-17.5", [], 0.0, 1.0),  # offline before even that
        ("drop", "0-25", [], 0.0, 1.0),
    ],
)
def test_under_partial_a_client_online_until_its_cut_work_arrives_is_a_straggler_not_a_dropout(
    tmp_path, stragglers, online, kept, late, dropouts
):
    """30 s of work at 1 sample/s, a 20 s deadline, batches of 6: the 18 samples it gets through by the deadline
    arrive at 18 s, while it is online (partial) unless it went offline before; its whole work would not (drop:
    offline before it is done)."""
    from types import SimpleNamespace

    from raysim.engine.devices import Devices

    rows = {"client": [0], "period_s": [100], "online": [online], "speed": [1.0]}
    layers = [
        {"systems": {"trace": write(tmp_path, rows)}, "federation": {"clients": 1, "participation": 1.0}},
        {"federation": {"deadline_s": 20.0, "stragglers": stragglers}},
    ]
    config = build_config("fedvpt", layers)
    devices = Devices(config, draw_profiles(config.systems, 1, seed=0))
    broadcast = SimpleNamespace(bytes_to=lambda client: 0.0)

    def update(samples):
        return SimpleNamespace(client_id=0, bytes_up=0.0, metrics={"samples": samples, "steps": samples})

    asked = []

    def retrain(work):
        asked.extend(work)
        return [update(int(30 * fraction) // 6 * 6) for _, fraction in work]

    updates, metrics, reached = devices.settle(0.0, broadcast, [update(30)], 0, retrain)
    assert [u.client_id for u in updates] == kept
    assert [u.client_id for u in reached] == ([] if dropouts else [0])  # a device that went offline sent nothing
    assert (metrics["stragglers"], metrics["dropouts"]) == (late, dropouts)
    assert [(c, pytest.approx(w)) for c, w in asked] == ([(0, 20 / 30)] if stragglers == "partial" else [])
