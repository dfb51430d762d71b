"""The data tests' shared fixture: owner tags (:func:`raysim.base.owned_files.owner_tag`) of files a killed process
left, one still being written, and another machine's."""

from __future__ import annotations

import os
import socket
import subprocess
from types import SimpleNamespace

import pytest


@pytest.fixture
def owners() -> SimpleNamespace:
    """``gone``: a process of this machine that has ended; ``running``: this one; ``elsewhere``: the ended pid on
    another machine, which this one cannot see."""
    ended = subprocess.Popen(["true"])
    ended.wait()  # a pid no process holds now
    host = socket.gethostname()
    return SimpleNamespace(
        gone=f"{ended.pid}-{'0' * 32}-{host}",
        running=f"{os.getpid()}-{'1' * 32}-{host}",
        elsewhere=f"{ended.pid}-{'2' * 32}-another-machine",
    )
