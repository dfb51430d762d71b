"""Exact resume: a run continued from its round-2 checkpoint ends with the same metrics and tensors as the run
that never stopped, for every kind of state a method keeps (and across backends)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from PIL import Image
from rich.console import Console

from raysim.algorithms._group_prompts import INSTABILITY, GroupDiagnostics
from raysim.base.errors import ConfigError
from raysim.base.sole_runner import sole_runner
from raysim.cli import main
from raysim.config import build_config
from raysim.core.protocol import CachesRowFeatures, Personalised, SendsExtras, SplitLearning
from raysim.core.registry import METHODS, get_method
from raysim.engine.callbacks import Callback
from raysim.engine.driver import run
from raysim.ops import selection as sel
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.smoke import FAST
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import provenance, resume

SMALL = {
    "federation": {"clients": 6, "rounds": 3, "participation": 0.5, "seed": 3, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "domains"},  # typed clients: FedGCR's family runs too
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
    "checkpoint": {"keep": 0},
    "fedgcr": {"clusters": 2},
}


def quiet_run(config, **kwargs):
    return run(config, show_progress=False, console=Console(file=io.StringIO()), **kwargs)


def comparable(history):
    return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]


def start(method, tracking_uri, tmp_path):
    layers = [
        {
            k: v
            for k, v in SMALL.items()
            if k in ("federation", "data", "model", "resources", "checkpoint")
            or k == method
            or (k == "fedgcr" and method in ("fedgc", "fedgr"))
        },
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    config = build_config(method, layers)
    full = quiet_run(config)
    folder = tmp_path / "ck" / full.run_id
    final = ckpt.load(folder)  # round 3, before the resumed run rewrites it
    return full, folder, final


def assert_same_tensors(a: ckpt.Checkpoint, b: ckpt.Checkpoint):
    for kind in ("params", "server"):
        left, right = getattr(a.state, kind), getattr(b.state, kind)
        assert list(left) == list(right)
        for name in left:
            assert torch.equal(left[name], right[name]), f"{kind}/{name}"
    assert list(a.client_states) == list(b.client_states)
    for client, tensors in a.client_states.items():
        for name, tensor in tensors.items():
            assert torch.equal(tensor, b.client_states[client][name]), f"client {client} {name}"


# methods whose checkpoint holds exactly the kind of state of the method named: resuming them is tested there (their
# own math differs only between checkpoints, in the local objective or the aggregation weights)
SAME_STATE_AS = {
    **dict.fromkeys(("fedprox", "fedsam", "fedvpt", "fedvpt-d", "head-tune", "qffl", "term"), "fedavg"),
    "fgpt-u": "fgpt",
    "fedgc": "fedgcr",
    "fedgr": "fedgcr",
    "festa": "fedv",
}
CAPABILITIES = (CachesRowFeatures, Personalised, SendsExtras, SplitLearning)


@pytest.mark.parametrize("method, like", SAME_STATE_AS.items())
def test_a_method_resumed_through_another_has_its_capabilities(method, like):
    def capabilities(name):
        return [issubclass(get_method(name).cls, c) for c in CAPABILITIES]

    assert capabilities(method) == capabilities(like)


@pytest.mark.parametrize("method", [m for m in METHODS if m not in SAME_STATE_AS])
def test_resumed_run_equals_the_uninterrupted_one(ray_session, tracking_uri, tmp_path, method):
    full, folder, final = start(method, tracking_uri, tmp_path)
    found = ckpt.load(folder / "round-000002")
    resumed = quiet_run(resume.resumed_config(found, method, []), resume=found)
    assert resumed.run_id == full.run_id
    assert comparable(resumed.history) == comparable(full.history)
    assert resumed.client_acc == full.client_acc and resumed.records == full.records
    assert_same_tensors(ckpt.load(folder), final)
    assert ckpt.load(folder).contributions == final.contributions and final.contributions
    logged = MlflowClient(tracking_uri).get_run(full.run_id)
    assert logged.info.status == "FINISHED"
    evaluations = [r["eval_counts"] for r in full.records if "eval_counts" in r]
    assert bool(evaluations) == issubclass(get_method(method).cls, GroupDiagnostics)
    if evaluations:  # SGPT Fig. 3's selection instability, logged once at the end
        assert logged.data.metrics[INSTABILITY] == pytest.approx(sel.instability(np.array(evaluations)))


def test_resume_on_the_ray_backend_with_more_rounds(ray_session, tracking_uri, tmp_path):
    """A sequential run's checkpoint continues on 2 Ray workers, extended by a round: the first rounds equal the
    uninterrupted sequential run's, and the MLflow run holds every round once."""
    full, folder, _ = start("fedgcr", tracking_uri, tmp_path)
    found = ckpt.load(folder / "round-000002")
    config = resume.resumed_config(
        found,
        None,
        [{"federation": {"rounds": 4}}, {"resources": {"backend": "ray", "workers": 2, "cpus_per_client": 0.5}}],
    )
    resumed = quiet_run(config, resume=found)
    assert comparable(resumed.history[:3]) == comparable(full.history) and len(resumed.history) == 4
    client = MlflowClient(tracking_uri)
    steps = [m.step for m in client.get_metric_history(full.run_id, "global_acc")]
    assert sorted(steps) == [1, 2, 3, 4]  # round 3 ran twice (rewound to 2), logged once
    # the run records the config it now runs: the name of a 4-round run, its config.yaml and description
    longer = build_config("fedgcr", [{**found.config, "tracking": {"run_name": None}}, {"federation": {"rounds": 4}}])
    logged = client.get_run(full.run_id)
    assert (
        logged.info.run_name
        == provenance.run_name(longer)
        != provenance.run_name(build_config("fedgcr", [found.config, {"tracking": {"run_name": None}}]))
    )
    saved = yaml.safe_load(Path(client.download_artifacts(full.run_id, "config.yaml", str(tmp_path))).read_text())
    assert saved["federation"]["rounds"] == 4
    assert " x 4 rounds, " in logged.data.tags["mlflow.note.content"]


def test_an_extended_run_summarises_the_evaluations_of_a_run_of_its_new_length(tracking_uri, tmp_path):
    """Evaluated every 2 rounds, a 3-round run evaluates rounds 2 and 3 (its last); extended to 4 rounds it holds the
    rounds of a 4-round run (and takes its name), whose evaluations are rounds 2 and 4, and so is its summary."""
    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "data", "model", "resources", "checkpoint")},
        {"federation": {"eval_every": 2}, "tracking": {"tracking_uri": tracking_uri}},
        {"checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    short = quiet_run(build_config("fedvpt", layers))
    extended = quiet_run(
        resume.resumed_config(ckpt.load(tmp_path / "ck" / short.run_id), None, [{"federation": {"rounds": 4}}]),
        resume=ckpt.load(tmp_path / "ck" / short.run_id),
    )
    fresh = quiet_run(build_config("fedvpt", [*layers, {"federation": {"rounds": 4}}]))
    assert [h["round"] for h in extended.history if "global_acc" in h] == [2, 3, 4]
    assert extended.summary == fresh.summary
    assert extended.summary["global_acc"]["mean"] == pytest.approx(
        (fresh.history[1]["global_acc"] + fresh.history[3]["global_acc"]) / 2
    )


def test_resume_refuses_changes_that_would_change_the_numbers(ray_session, tracking_uri, tmp_path):
    _, folder, _ = start("fedvpt", tracking_uri, tmp_path)
    found = ckpt.load(folder)
    with pytest.raises(ConfigError, match="has already run 3 of its 3 rounds; pass --rounds N with N > 3"):
        resume.resumed_config(found, None, [])
    with pytest.raises(ConfigError, match="train.lr cannot change when resuming"):
        resume.resumed_config(found, None, [{"federation": {"rounds": 5}}, {"train": {"lr": 0.1}}])
    with pytest.raises(ConfigError, match="is a fedvpt run, not sgpt"):
        resume.resumed_config(found, "sgpt", [])
    threads = found.config["resources"]["threads"]  # resolved when the run started
    with pytest.raises(ConfigError, match=f"the run's clients sum with {threads} torch threads"):
        resume.resumed_config(found, None, [{"federation": {"rounds": 5}}, {"resources": {"threads": threads + 1}}])
    same = resume.resumed_config(found, None, [{"federation": {"rounds": 5}}, {"resources": {"threads": threads}}])
    assert same.resources.threads == threads >= 1
    assert (
        resume.resumed_config(found, None, [{"federation": {"rounds": 5}}]).train.precision
        == found.config["train"]["precision"]
    )
    # a checkpoint written before train.precision existed ran in float32, and goes on in float32
    older = {**found.config, "train": {k: v for k, v in found.config["train"].items() if k != "precision"}}
    legacy = dataclasses.replace(found, config=older)
    assert resume.resumed_config(legacy, None, [{"federation": {"rounds": 5}}]).train.precision == "fp32"
    assert resume.find(found.run_id, checkpoint_dir=str(tmp_path / "ck")).round == 3
    # and a run another process resumes is not resumed twice at once (the second would prune the first's checkpoints)
    with sole_runner(folder, "the first", "resume it", in_place=True):
        second = CliRunner().invoke(main, ["run", "--resume", str(folder), "--rounds", "5"])
    assert second.exit_code == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert f"raysim: error: run {found.run_id} is running in another process ({folder}); wait for it" in second.stderr
    assert not [p.name for p in folder.iterdir() if not p.name.startswith("round-")]  # nothing left in the folder


def test_a_run_still_running_is_not_resumed_by_another_process(ray_session, tracking_uri, tmp_path):
    """A resume started while the run is still running (its round 1 checkpointed) stops in one line and changes
    nothing: the run goes on to its last round."""

    class ResumeAfterRound1(Callback):
        def after_round(self, round, report) -> bool:
            if round == 1:
                folder = next((tmp_path / "ck").iterdir())
                tried.append(CliRunner().invoke(main, ["run", "--resume", str(folder), "--rounds", "5"]))
            return False

    tried = []
    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "data", "model", "resources", "checkpoint")},
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    result = quiet_run(build_config("fedavg", layers), callbacks=[ResumeAfterRound1()])
    (second,) = tried
    assert second.exit_code == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert f"raysim: error: run {result.run_id} is running in another process" in second.stderr
    assert len(result.history) == 3 and ckpt.load(tmp_path / "ck" / result.run_id).round == 3


def test_a_run_resumes_only_on_the_data_it_started_on(ray_session, tracking_uri, tmp_path, monkeypatch):
    """The run reads its rows from a file given by a relative path: resumed from another folder it reads the same
    file (the path is absolute in its config), and after the file changed it stops in one line before it trains."""
    rows = np.random.default_rng(0).integers(0, 256, (24, 16, 16, 3), dtype=np.uint8)

    def write(images):
        pngs = []
        for image in images:
            pngs.append(io.BytesIO())
            Image.fromarray(image).save(pngs[-1], format="PNG")
        table = pa.table({"image": [png.getvalue() for png in pngs], "label": [i % 3 for i in range(24)]})
        pq.write_table(table, tmp_path / "rows.parquet")

    write(rows)
    monkeypatch.chdir(tmp_path)
    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "model", "resources", "checkpoint")},
        {"data": {"dataset": "parquet", "data_dir": "rows.parquet", "partition": "iid"}},
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    full = quiet_run(build_config("fedavg", layers))
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000002")
    assert found.config["data"]["data_dir"] == str(tmp_path / "rows.parquet")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    resumed = quiet_run(resume.resumed_config(found, None, []), resume=found)
    assert comparable(resumed.history) == comparable(full.history)

    write(255 - rows)
    with pytest.raises(ConfigError) as refused:
        quiet_run(resume.resumed_config(found, None, []), resume=found)
    assert str(refused.value).startswith(
        f"run {full.run_id} cannot resume: its data read from {tmp_path / 'rows.parquet'} are not the data it "
        "started on (digest "
    )
    assert "\n" not in str(refused.value)
    assert MlflowClient(tracking_uri).get_run(full.run_id).info.status == "FINISHED"  # left as it was


def test_a_run_resumes_only_from_the_backbone_weights_it_started_from(tracking_uri, tmp_path):
    """The backbone is frozen and never checkpointed: rebuilt on resume from its weights file, which must be the
    file the run started from. Replaced under the same name, the run stops in one line before it trains; put back,
    it resumes to the uninterrupted run's numbers."""
    from safetensors.torch import save_file

    from raysim.models.backbones import build_backbone

    weights = tmp_path / "backbone.safetensors"
    state = {k: v.contiguous() for k, v in build_backbone("raysim_vit_nano_p4_16", seed=5).state_dict().items()}
    save_file(state, str(weights))
    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "data", "resources", "checkpoint")},
        {"federation": {"rounds": 2}, "model": {"backbone": "raysim_vit_nano_p4_16", "weights": str(weights)}},
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    full = quiet_run(build_config("fedvpt", layers))
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000001")
    save_file({k: v * 1.01 for k, v in state.items()}, str(weights))
    with pytest.raises(ConfigError) as refused:
        quiet_run(resume.resumed_config(found, None, []), resume=found)
    said = str(refused.value)
    assert said.startswith(f"run {full.run_id} cannot resume: its backbone weights ({weights}) are not those it ")
    assert said.endswith("; put the run's weights back as they were") and "\n" not in said
    save_file(state, str(weights))
    resumed = quiet_run(resume.resumed_config(found, None, []), resume=found)
    assert comparable(resumed.history) == comparable(full.history)


KILLED_AFTER_CHECKPOINT = """
import io, json, os, sys
from rich.console import Console
from raysim.config import build_config
from raysim.engine import callbacks
from raysim.engine.driver import run

logged = callbacks.MLflowLogger.after_round


def killed_in_round(self, round, report):  # as the OOM killer would: before or after the round's metrics are logged
    if round == int(sys.argv[2]) and sys.argv[3] == "before":
        os._exit(9)
    logged(self, round, report)
    if round == int(sys.argv[2]):
        os._exit(9)
    return False


callbacks.MLflowLogger.after_round = killed_in_round
run(build_config("fedvpt", json.loads(sys.argv[1])), show_progress=False, console=Console(file=io.StringIO()))
"""


def killed(layers, round: int, when: str) -> None:
    """A run of ``layers`` killed in ``round``, ``when`` ("before" or "after") its metrics reach MLflow."""
    args = [sys.executable, "-c", KILLED_AFTER_CHECKPOINT, json.dumps(layers), str(round), when]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr


def test_a_round_checkpointed_but_never_logged_is_logged_when_the_run_resumes(tracking_uri, tmp_path):
    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "data", "model", "resources", "checkpoint")},
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    killed(layers, 2, "before")  # round 2's checkpoint written, its metrics not yet logged
    (folder,) = (tmp_path / "ck").iterdir()
    found = ckpt.load(folder)
    client = MlflowClient(tracking_uri)
    assert found.round == 2 and [m.step for m in client.get_metric_history(found.run_id, "global_acc")] == [1]
    quiet_run(resume.resumed_config(found, None, []), resume=found)
    history = client.get_metric_history(found.run_id, "global_acc")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert [m.value for m in history if m.step == 2] == [pytest.approx(found.history[1]["global_acc"])]


def test_rounds_logged_past_the_checkpoint_are_not_logged_again_when_the_run_resumes(tracking_uri, tmp_path):
    """Checkpoints every 2 rounds, the process killed once round 3 is logged: the resume replays round 3 from round
    2's checkpoint, and MLflow keeps one point a round."""
    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "data", "model", "resources")},
        {"federation": {"rounds": 4}, "checkpoint": {"keep": 0, "every": 2, "dir": str(tmp_path / "ck")}},
        {"tracking": {"tracking_uri": tracking_uri}},
    ]
    killed(layers, 3, "after")
    (folder,) = (tmp_path / "ck").iterdir()
    found = ckpt.load(folder)
    client = MlflowClient(tracking_uri)
    before = client.get_metric_history(found.run_id, "global_acc")
    assert found.round == 2 and [m.step for m in before] == [1, 2, 3]
    quiet_run(resume.resumed_config(found, None, []), resume=found)
    history = client.get_metric_history(found.run_id, "global_acc")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]
    assert [m.value for m in history if m.step == 3] == [before[2].value]


def test_a_ctrl_c_while_a_finished_run_logs_its_results_lets_them_in(tracking_uri, tmp_path, monkeypatch):
    """The rounds are done: the first Ctrl-C while their results go to MLflow is noted, not obeyed (the run's final
    state and figures exist nowhere else once it ends)."""
    from raysim.engine import driver
    from raysim.tracking.mlflow import Tracker

    logged = Tracker.log_artifact
    sent = []

    def log_artifact(self, *args, **kwargs):
        if not sent:
            sent.append(os.kill(os.getpid(), signal.SIGINT))  # the user's Ctrl-C, in the middle of the results
        return logged(self, *args, **kwargs)

    layers = [
        {k: v for k, v in SMALL.items() if k in ("federation", "data", "model", "resources", "checkpoint")},
        {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck")}},
    ]
    config = build_config("fedvpt", layers)
    real_results = driver._log_results

    def results_with_a_ctrl_c(*args, **kwargs):
        monkeypatch.setattr(Tracker, "log_artifact", log_artifact)
        return real_results(*args, **kwargs)

    monkeypatch.setattr(driver, "_log_results", results_with_a_ctrl_c)
    shown = io.StringIO()
    finished = run(config, show_progress=False, console=Console(file=shown))
    client = MlflowClient(tracking_uri)
    assert sent and client.get_run(finished.run_id).info.status == "FINISHED"
    assert "summary.json" in {a.path for a in client.list_artifacts(finished.run_id)}
    assert "Ctrl-C: the rounds are done; logging their results, then the run ends" in shown.getvalue()


def test_a_resumed_run_shows_a_dashboard_only_where_its_own_command_asks():
    """Whether a local Ray shows its dashboard is each command's choice, not the run's: a run started with
    --dashboard resumes on another backend or a cluster without it, and a resume may ask for it."""
    recorded = build_config("fedvpt", [FAST, {"resources": {"dashboard": True, "dashboard_host": "10.0.0.5"}}])
    found = ckpt.Checkpoint("r", 1, recorded.to_dict(), None, {}, "sqlite:///never.db")
    moved = resume.resumed_config(found, "fedvpt", [{"resources": {"backend": "sequential"}}])
    assert not moved.resources.dashboard and moved.resources.dashboard_host == "127.0.0.1"
    asked = resume.resumed_config(found, "fedvpt", [{"resources": {"dashboard": True}}])
    assert asked.resources.dashboard and asked.resources.dashboard_host == "127.0.0.1"
