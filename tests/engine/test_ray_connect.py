"""``connect_ray_during``: the run's set-up (data, initial state) on a thread while Ray starts on the caller's; what in
the set-up needs Ray waits for it."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import raysim
from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.engine.ray_auth import ensure_token
from raysim.engine.ray_connect import (
    check_reachable,
    connect_ray_during,
    refuse_unused_dashboard,
    warn_of_another_raysim,
)
from raysim.testing.smoke import FAST


def test_the_setup_runs_on_another_thread_and_its_error_surfaces_on_the_callers(ray_session):
    resources = build_config("fedvpt", [FAST]).resources
    seen = {}

    def work():
        seen["thread"] = threading.current_thread()
        return "state"

    assert connect_ray_during(resources, work) == "state"
    assert seen["thread"] is not threading.current_thread()

    def bad():
        raise ConfigError("data.dataset='nope' is not a dataset")

    with pytest.raises(ConfigError, match="is not a dataset"):
        connect_ray_during(resources, bad)


def test_meanwhile_runs_on_the_callers_thread_while_the_setup_still_runs(ray_session):
    """What the run opens after its set-up (the store's modules) is imported on the caller's thread once Ray is up,
    while the set-up waits for the model's build."""
    resources = build_config("fedvpt", [FAST]).resources
    waited, ran = threading.Event(), []

    def work():
        return waited.wait(timeout=30)  # the set-up ends only after meanwhile ran

    def meanwhile():
        ran.append(threading.current_thread())
        waited.set()

    assert connect_ray_during(resources, work, meanwhile) is True
    assert ran == [threading.current_thread()]


STARTS_RAY = """
import time
import ray
from raysim.config import build_config
from raysim.data.sources import ray_data
from raysim.engine.ray_connect import connect_ray_during
from raysim.engine.setup import _one_machine

def work():
    before = ray.is_initialized()  # the set-up starts while Ray is starting,
    rows = ray_data().range(8).count()  # and Ray Data (glyph generation) waits for it instead of starting another
    return before, rows, _one_machine()

before, rows, one_machine = connect_ray_during(build_config("fedvpt", []).resources, work)
assert (before, rows, one_machine) == (False, 8, True), (before, rows, one_machine)
time.sleep(1)  # the set-up thread has ended: daemons started from it would be gone by now
print("put and got", ray.get(ray.put(7), timeout=30), flush=True)

@ray.remote(num_gpus=0)
def visible():
    import os
    return os.environ.get("CUDA_VISIBLE_DEVICES")

print("a worker without GPUs sees", repr(ray.get(visible.remote(), timeout=60)), flush=True)
"""


def test_a_local_ray_started_beside_the_setup_outlives_the_setup_thread():
    """Ray starts on the calling thread: its daemons die with the thread that started them (Linux's parent-death
    signal is per thread), and a driver whose raylet died exits at its next call. Ray Data on the set-up thread
    waits for that Ray: started there, it raised "called ray.init twice" (the first run's glyph generation)."""
    done = subprocess.run([sys.executable, "-c", STARTS_RAY], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "put and got 7" in done.stdout
    assert "a worker without GPUs sees ''" in done.stdout  # Ray 2.60 left CUDA_VISIBLE_DEVICES as it was (None)


SEQUENTIAL = """
import os
import sys
import threading
import time

import ray

from raysim.cli import main
from raysim.config import build_config
from raysim.data.sources import ray_data
from raysim.engine.ray_connect import connect_ray_during
from raysim.testing.chaos import descendants
from raysim.testing.smoke import FAST

def children():  # the processes below this one (Ray's daemons and their workers)
    return len(descendants(os.getpid()))

def run_quick():  # a run on the synthetic set: its read needs no Ray Data
    try:
        main(["run", "fedvpt", "--preset", "quick", "--backend", "sequential", "--no-progress", "--tracking-uri",
              sys.argv[1]])
    except SystemExit as done:
        assert done.code in (0, None), done.code

run_quick()
print("after the run, Ray is up:", ray.is_initialized(), flush=True)

def work():  # a source that generates with Ray Data (a glyph set's first run), on the set-up thread
    rows, put = ray_data().range(8).count(), ray.get(ray.put(7), timeout=30)
    print("during the set-up, Ray's processes:", min(children(), 3), flush=True)  # GCS, raylet, ... (3 or more)
    return threading.current_thread() is threading.main_thread(), rows, put, os.environ.get("RAY_AUTH_MODE")

sequential = build_config("fedvpt", [FAST, {"resources": {"backend": "sequential"}}]).resources
print("on the main thread, rows, put, auth:", connect_ray_during(sequential, work), flush=True)
up, waited = ray.is_initialized(), 0
while children() and waited < 50:  # a slow machine's daemons may take a moment to exit
    time.sleep(0.2)
    waited += 1
print("after the set-up, Ray is up:", up, "its processes:", children(), flush=True)
starts, real_init = [], ray.init  # Ray's start on first use calls ray.init too
ray.init = lambda *args, **kwargs: starts.append(1) or real_init(*args, **kwargs)
run_quick()  # its read does not look for Ray Data's actors: that would start Ray
print("Ray's starts in a second run:", len(starts), flush=True)
"""


def test_the_sequential_backend_starts_no_ray_until_the_setup_needs_ray_data(tmp_path):
    """Its clients train in the driver's process: no Ray daemons (390 MB and 3 s at start-up, docs/performance.md).
    Ray Data on the set-up thread has the run's thread start the lean local Ray (not Ray's default: dashboard,
    no idle workers), with token authentication on, as Ray has it for a local cluster: it serves the whole set-up
    and is stopped, its processes gone, once the set-up ends."""
    home = tmp_path / "home"  # the token file goes to ~/.ray, made here for a user who had none
    own_token = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")  # the suite's (tests/conftest.py): this user has none
    env = {k: v for k, v in os.environ.items() if k not in own_token} | {"HOME": str(home)}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    done = subprocess.run(
        [sys.executable, "-c", SEQUENTIAL, uri], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "after the run, Ray is up: False" in done.stdout
    assert "during the set-up, Ray's processes: 3" in done.stdout
    assert "on the main thread, rows, put, auth: (False, 8, 7, 'token')" in done.stdout
    assert (home / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600 and "Token authentication" not in done.stderr
    assert "after the set-up, Ray is up: False its processes: 0" in done.stdout
    assert "Ray's starts in a second run: 0" in done.stdout


def test_a_run_started_beside_other_raysim_code_is_told_its_workers_would_import_that(tmp_path, caplog):
    ours = Path(raysim.__file__).parent
    only_code = shutil.ignore_patterns("__pycache__", "*.safetensors")  # the comparison reads Python files only
    shutil.copytree(ours, tmp_path / "same" / "raysim", ignore=only_code)  # links followed
    shutil.copytree(tmp_path / "same" / "raysim", tmp_path / "changed" / "raysim")
    (tmp_path / "changed" / "raysim" / "algorithms" / "fedavg.py").write_text("# edited since the install\n")
    with caplog.at_level(logging.WARNING, logger="raysim"):
        for quiet in (ours.parent, tmp_path / "same", tmp_path / "nothing-here"):
            warn_of_another_raysim(quiet)
        assert not caplog.records
        warn_of_another_raysim(tmp_path / "changed")
        assert [r for r in caplog.records if "the workers will import" in r.getMessage()]


def test_an_address_where_a_web_server_answers_is_refused_in_seconds_not_retried_for_minutes():
    """Ray's own connection retries a service that is not its GCS (here a web server) for minutes; the probe asks
    for gRPC, which Ray's GCS and client server speak, and gives up after its timeout."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ConfigError, match=f"{address} answers, but not as Ray: no gRPC within 1 s"):
            check_reachable(address, timeout_s=1.0)
    finally:
        server.shutdown()
        server.server_close()


def test_the_token_file_is_written_whole_once_and_a_users_own_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)  # the suite's own (tests/conftest.py)
    path = tmp_path / ".ray" / "auth_token"
    ensure_token(path)
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0 and path.stat().st_mode & 0o777 == 0o600
    ensure_token(path)
    assert path.read_text() == token and [p.name for p in path.parent.iterdir()] == ["auth_token"]


def test_a_dashboard_setting_that_would_do_nothing_is_refused():
    """A local Ray's dashboard is shown only where the run starts that Ray for its rounds."""
    asked = build_config("fedvpt", [FAST, {"resources": {"dashboard": True}}]).resources
    refuse_unused_dashboard(asked, None, "--address")  # a local Ray for the rounds: shown
    with pytest.raises(ConfigError, match=r"joins the cluster at '10.0.0.1:6379' \(RAY_ADDRESS\), whose dashboard"):
        refuse_unused_dashboard(asked, "10.0.0.1:6379", "RAY_ADDRESS")
    with pytest.raises(ConfigError, match="sequential backend starts none .* drop --dashboard, or use --backend ray"):
        refuse_unused_dashboard(asked, None, "--address", rounds_on_ray=False)
    host = build_config("fedvpt", [FAST, {"resources": {"dashboard_host": "0.0.0.0"}}]).resources
    with pytest.raises(ConfigError, match="dashboard_host=0.0.0.0 is where --dashboard listens; add --dashboard"):
        refuse_unused_dashboard(host, None, "--address")
    refuse_unused_dashboard(build_config("fedvpt", [FAST]).resources, "10.0.0.1:6379", "--address")
