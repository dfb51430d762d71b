"""``reuse_freed_memory``: a large freed block serves the next one instead of fresh pages; ``trim_memory``: what a
thread freed goes back to the system (the driver's set-up runs on a thread)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from raysim.base.memory import reuse_freed_memory, trim_memory

GLIBC_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_trim; elsewhere both are no-ops"
)


def resident_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


REUSE = """
import resource, numpy as np
from raysim.base.memory import reuse_freed_memory

def faults():  # page faults of ten 64 MB blocks, each freed before the next (as a forward's activations are)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        block = np.empty(8 << 20)
        block.fill(1.0)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = faults()
print(default, reuse_freed_memory(), faults())
"""


def page_faults(**env: str) -> tuple[int, str, int]:
    """REUSE in a process of its own (the setting is the process's), with ``env`` added to its environment."""
    mine = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    mine.pop("GLIBC_TUNABLES", None)  # glibc's defaults, whatever the environment running the tests sets
    default, took, reused = subprocess.run(
        [sys.executable, "-c", REUSE], capture_output=True, text=True, check=True, env={**mine, **env}
    ).stdout.split()
    return int(default), took, int(reused)


@GLIBC_ONLY
def test_freed_blocks_serve_the_next_ones_instead_of_fresh_pages():
    """glibc maps a block over 32 MB anew and faults in every page of it each time; once told to reuse, only the first
    block faults."""
    default, took, reused = page_faults()
    assert took == "True"
    assert reused * 4 < default, (default, reused)  # about 1 block's pages against 10 blocks'


@GLIBC_ONLY
@pytest.mark.parametrize(
    "env",
    [{"MALLOC_TRIM_THRESHOLD_": "131072"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}],
    ids=["variable", "tunable"],
)
def test_a_threshold_the_user_set_is_kept(env):
    """The user's own setting of glibc's thresholds stands: every block is mapped afresh, as without raysim."""
    default, took, reused = page_faults(**env)
    assert took == "False"
    assert reused * 2 > default, (default, reused)


@GLIBC_ONLY
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


def test_elsewhere_both_do_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not trim_memory() and not reuse_freed_memory()
