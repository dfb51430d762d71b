"""``trim_memory``: what a thread freed goes back to the system (the driver's set-up runs on a thread)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from raysim.core.memory import trim_memory


def resident_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's malloc_trim; elsewhere trim_memory is a no-op"
)
def test_a_threads_freed_buffers_go_back_to_the_system_when_trimmed():
    kept = []

    def read():  # 200 MB of 1 KB buffers (malloc's, not Python's small-object arenas); every 50th outlives the thread
        buffers = [bytes(1024) for _ in range(200_000)]
        kept.extend(buffers[::50])

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    before = resident_mb()  # the freed buffers' pages are still the process's: the kept ones pin the arena's heap
    assert trim_memory()
    assert before - resident_mb() > 100, (before, resident_mb())
    assert len(kept) == 4_000


def test_elsewhere_trimming_does_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not trim_memory()
