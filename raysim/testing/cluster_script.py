"""A script that builds its own multi-node local Ray cluster (``ray.cluster_utils.Cluster``), run in a process of its
own: a test process may already hold the session's Ray, and a process can hold only one. The script prints one line
``RESULT {json}``; the cluster's processes go with the script's process group."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

MARKER = "RESULT "


class ScriptFailed(AssertionError):
    """The script exited non-zero, ran past its time or printed no result; the message ends with its stderr."""


def cluster_script_result(script: Path, argument: str, timeout_s: float) -> tuple[dict, str]:
    """(the JSON ``script`` printed after :data:`MARKER`, its stderr) of ``python script argument``, run with a private
    short Ray temp folder (unix socket paths stay short, and the cluster's address file never redirects another
    process's ``ray.init()`` on this machine to it) and without ``RAY_ADDRESS``."""
    ray_tmp = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}  # RAYSIM_CACHE is passed through
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [sys.executable, str(script), argument],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        raise ScriptFailed(f"{script.name} took over {timeout_s} s:\n{err[-4000:]}") from None
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    lines = [line for line in out.splitlines() if line.startswith(MARKER)]
    if process.returncode != 0 or len(lines) != 1:
        raise ScriptFailed(f"{script.name} exited {process.returncode}:\n{out[-2000:]}\n{err[-4000:]}")
    return json.loads(lines[0][len(MARKER) :]), err
