"""The preparing thread and Ray's start (``engine.ray_connect.connect_ray_during``): when the start fails, the thread
stops at its next wait instead of starting a Ray of its own."""

from __future__ import annotations

import threading

import pytest

from raysim.base.errors import ConfigError
from raysim.base.ray_start import RayDidNotStart, starting_ray, wait_for_ray


def waiting_thread(go: threading.Event, seen: list) -> threading.Thread:
    def prepare() -> None:
        go.wait(timeout=30)
        try:
            wait_for_ray()
            seen.append("went on")
        except RayDidNotStart as error:
            seen.append(str(error))

    return threading.Thread(target=prepare)


def test_a_failed_start_stops_the_thread_it_started_at_its_next_wait():
    go, seen = threading.Event(), []
    preparing = waiting_thread(go, seen)
    with pytest.raises(ConfigError), starting_ray(preparing):
        preparing.start()
        raise ConfigError("could not connect to Ray at '10.0.0.1:6379'")
    go.set()
    preparing.join(timeout=30)
    assert seen == ["Ray did not start: could not connect to Ray at '10.0.0.1:6379'"]
    wait_for_ray()  # any other thread goes on


def test_after_a_start_that_worked_the_thread_goes_on():
    go, seen = threading.Event(), []
    preparing = waiting_thread(go, seen)
    with starting_ray(preparing):
        preparing.start()
        go.set()  # it waits for the start to end
    preparing.join(timeout=30)
    assert seen == ["went on"]
