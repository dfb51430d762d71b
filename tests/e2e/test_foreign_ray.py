"""A run never trips over another Ray on the machine: without ``--address`` raysim starts its own local Ray, whatever
``ray start`` left running or behind (a plain ``ray.init()`` would join that cluster and refuse raysim's start-up
options, or fail on its stale address file); with ``--address`` (or ``$RAY_ADDRESS``) it joins the user's cluster."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from raysim.base.errors import ConfigError
from raysim.engine.ray_connect import check_reachable
from raysim.testing.console import own_lines

RUN = ["run", "fedvpt", "--preset", "quick", "--rounds", "1", "--no-progress", "--workers", "2"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def raysim(env, tmp_path, *args) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "raysim.cli", *args, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]
    return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)


def test_a_run_starts_its_own_ray_beside_a_users_cluster_and_joins_it_only_when_asked(tmp_path, monkeypatch):
    # A private, short (unix socket paths) Ray temp dir: the head's address file lands there, where only the
    # processes this test starts look (RAY_TMPDIR), not the other tests' Ray sessions.
    ray_tmp = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    address_file = Path(ray_tmp) / "ray" / "ray_current_cluster"
    head = subprocess.Popen(
        [
            *("ray", "start", "--head", f"--port={free_port()}", "--num-cpus=1", "--num-gpus=0"),
            *("--include-dashboard=false", "--disable-usage-stats", "--block"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            assert head.poll() is None, head.stderr.read()
            time.sleep(0.5)
        assert address_file.exists(), "ray start wrote no address file within 60 s"
        stale = address_file.read_text()

        own = raysim(env, tmp_path, *RUN)  # 2 workers of 1 CPU: more than the user's 1-CPU cluster holds
        assert own.returncode == 0, own.stderr[-3000:]

        # asked with --address, or with RAY_ADDRESS (which Ray sets for a job's entrypoint); by its address, since
        # 'auto' takes the newest of the machine's Ray instances, the other tests' among them. The cluster holds
        # the suite's token (tests/conftest.py), which Ray sends to a given address under RAY_AUTH_MODE=token only
        sends = {**env, "RAY_AUTH_MODE": "token"}
        for joined in (
            raysim(sends, tmp_path, *RUN, "--address", stale.strip()),
            raysim({**sends, "RAY_ADDRESS": stale.strip()}, tmp_path, *RUN),
        ):
            assert joined.returncode == 2, joined.stderr[-3000:]
            assert len(own_lines(joined.stderr)) == 1, joined.stderr[-3000:]
            (line,) = own_lines(joined.stderr)
            assert "2 workers x (cpus_per_client=1.0, gpus_per_client=0.0) do not fit the Ray cluster's 1 CPU" in line
        # without the mode, or with another token, the probe refuses in one line (Ray's own retries for 20 s)
        (tmp_path / "other-token").write_text("0" * 64)
        with monkeypatch.context() as patched:
            patched.delenv("RAY_AUTH_MODE", raising=False)
            with pytest.raises(ConfigError, match="asks for a token, which Ray sends to a given address only under"):
                check_reachable(stale.strip())
            patched.setenv("RAY_AUTH_MODE", "token")
            patched.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "other-token"))
            with pytest.raises(ConfigError, match="refused this machine's token \\(from .*other-token\\); put the"):
                check_reachable(stale.strip())
    finally:
        # `ray start` alone: it drains its node through its GCS, then stops its processes (in 1 s); a SIGTERM to
        # the whole group would stop the GCS too and leave it waiting 30 s for a drain that cannot answer
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
    try:
        address_file.parent.mkdir(parents=True, exist_ok=True)
        address_file.write_text(stale)  # what a head that died left behind
        # a run that starts its own Ray gets as far as sizing its pool on it (one line, at once); one that went for
        # the stale address would fail connecting, or wait for it
        after = raysim(env, tmp_path, *RUN, "--cpus-per-client", "1000", "--workers", "1")
        assert after.returncode == 2, after.stderr[-3000:]
        assert len(own_lines(after.stderr)) == 1, after.stderr[-3000:]
        assert "1 worker x (cpus_per_client=1000.0, gpus_per_client=0.0) does not fit the Ray cluster's" in after.stderr
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
