"""Fault injection for robustness checks (tests and ``bench/worker_failures.py``): SIGKILL the process of a Ray
actor of this driver's local cluster, as a crash or a preempted node would.

Only processes below this one count (``ray.init`` without an address starts the raylet as a child of the driver,
and actor processes as children of the raylet), so another Ray session on the same machine is never touched.
Linux only (reads ``/proc``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def actor_pids(class_name: str, busy_in: tuple[str, ...] = ()) -> list[int]:
    """Process ids of this driver's live ``class_name`` actors (Ray titles them ``ray::Class`` or
    ``ray::Class.method`` while busy), sorted; with ``busy_in``, only those running one of these methods."""
    wanted = tuple(f"ray::{class_name}.{method}" for method in busy_in) or (f"ray::{class_name}.",)
    pids = []
    for pid in descendants(os.getpid()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(wanted) or (not busy_in and title == f"ray::{class_name}"):
            pids.append(pid)
    return sorted(pids)


def kill_actor(class_name: str, rng: np.random.Generator | None = None, busy_in: tuple[str, ...] = ()) -> int | None:
    """SIGKILL one live ``class_name`` actor process (a random one with ``rng``, else the first; with ``busy_in``,
    one running one of these methods); its pid, or None when there is none."""
    pids = actor_pids(class_name, busy_in)
    if not pids:
        return None
    pid = pids[int(rng.integers(len(pids)))] if rng is not None else pids[0]
    os.kill(pid, signal.SIGKILL)
    return pid


def kill_busy_actor(class_name: str, methods: tuple[str, ...], timeout_s: float = 30.0) -> int | None:
    """SIGKILL the first ``class_name`` actor seen running one of ``methods`` (polled every 5 ms), so the kill lands
    mid-task; its pid, or None when none was busy within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = kill_actor(class_name, busy_in=methods)
        if pid is not None:
            return pid
        time.sleep(0.005)
    return None
