"""``raysim compare`` end to end on the real Ray Tune and MLflow: 2 methods x 2 seeds on the quick preset, one run
per cell nested under the comparison's own run, the report's intervals recomputed from the cells' logged figures,
the same partition for every method of a seed, a second run of the command that resumes (runs nothing), a second
process refused while one runs, ``raysim report`` on the comparison, a tuning budget spent alike on every method
(a tuning left unrestorable by a killed comparison tuned anew), and bad input stopped before any run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from scipy import stats

from raysim.base.sole_runner import sole_runner
from raysim.cli import main
from raysim.testing.console import own_lines
from raysim.tracking.comparison import TUNING_SEED, tuning_seeds

VARIANT = "fedvpt:prompt_length=2"
# VARIANT named first: the paired rows are fedavg - VARIANT, whatever the alphabet says
COMMAND = ["compare", VARIANT, "fedavg", "--preset", "quick", "--seeds", "2", "--rounds", "2"]
COMMAND += ["--backend", "sequential"]
NAME = "compare-fedvpt:prompt_length=2-fedavg-quick"


def _cells(client):
    return _cells_of(client, NAME)


def _cells_of(client, name):
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    (own,) = [r for r in runs if r.data.tags.get("raysim.kind") == "comparison"]
    return own, [r for r in runs if r is not own]


def _row(text: str, first: str, table: int = 0) -> list[str]:
    """The cells of the row that starts with ``first`` in the report's ``table``-th table (0: methods, 1: paired)."""
    line = [line for line in text.splitlines() if line.startswith(f"| {first} |")][table]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_compare_runs_every_cell_reports_intervals_and_resumes(ray_session, tmp_path, tracking_uri):
    result = CliRunner().invoke(main, [*COMMAND, "--tracking-uri", tracking_uri])
    assert result.exit_code == 0, result.output + result.stderr
    shown = result.stderr.splitlines()  # a line per cell started and ended, and no Tune trial table
    assert sum(line.startswith("started ") for line in shown) == 4
    assert "Configuration for experiment" not in result.output and "Trial status" not in result.output
    ended = sorted(line.split(": final global accuracy ")[0] for line in shown if line.startswith("finished "))
    assert ended == [f"finished {m}/s{s}" for m in ("fedavg", VARIANT) for s in (0, 1)]
    assert shown[-1].endswith("(4 of 4 cells done)"), shown[-1]
    client = MlflowClient(tracking_uri)
    own, cells = _cells(client)
    assert own.info.status == "FINISHED" and own.data.params["compare.tune_budget"] == "0"
    assert sorted((r.data.tags["raysim.variant"], r.data.tags["seed"]) for r in cells) == [
        ("fedavg", "0"),
        ("fedavg", "1"),
        (VARIANT, "0"),
        (VARIANT, "1"),
    ]
    assert {r.data.params["fedvpt.prompt_length"] for r in cells if r.data.tags["method"] == "fedvpt"} == {"2"}
    assert all(r.info.status == "FINISHED" and r.data.tags["mlflow.parentRunId"] == own.info.run_id for r in cells)
    assert all(r.info.run_name == r.data.tags["raysim.cell"] for r in cells)  # fedvpt:prompt_length=2/s1, ...
    digest = {(r.data.tags["method"], r.data.tags["seed"]): r.inputs.dataset_inputs[0].dataset.digest for r in cells}
    assert digest["fedavg", "0"] == digest["fedvpt", "0"] != digest["fedavg", "1"] == digest["fedvpt", "1"]
    assert {a.path for a in client.list_artifacts(own.info.run_id)} == {
        "report.md",
        "accuracy_vs_fairness.png",
        "accuracy_vs_bytes.png",
    }
    report = Path(client.download_artifacts(own.info.run_id, "report.md", str(tmp_path))).read_text()
    assert "- seeds: 0, 1 (2)" in report and "- tuning: presets (no tuning)" in report and "precision: " in report

    def logged(method):
        runs = sorted((r for r in cells if r.data.tags["raysim.variant"] == method), key=lambda r: r.data.tags["seed"])
        return np.array([r.data.metrics["summary/global_acc_mean"] for r in runs])

    figures = own.data.metrics  # the report's figures as metrics of the comparison's own run, for MLflow's table
    for method, shown in (("fedavg", "fedavg"), (VARIANT, "fedvpt_prompt_length_2")):  # '=' is no metric name's
        values = logged(method)  # mean ± t(0.975, 1) * sd / sqrt(2), recomputed here
        half = stats.t.ppf(0.975, 1) * values.std(ddof=1) / np.sqrt(2)
        assert _row(report, method)[4] == f"{values.mean():.2f} ± {half:.2f}"
        assert figures[f"{shown}/global_acc_mean"] == pytest.approx(values.mean())
        assert figures[f"{shown}/global_acc_mean_ci95"] == pytest.approx(half)
    trainable = {r.data.tags["method"]: r.data.metrics["trainable_params"] for r in cells}
    assert trainable["fedvpt"] < trainable["fedavg"]  # prompts + head against the whole model
    assert _row(report, VARIANT)[2] == f"{int(trainable['fedvpt']):,}"
    differences = logged("fedavg") - logged(VARIANT)  # paired with the first method named, not the first in order
    half = stats.t.ppf(0.975, 1) * differences.std(ddof=1) / np.sqrt(2)
    assert f"## Paired with {VARIANT} " in report
    assert _row(report, "fedavg", table=1)[1].startswith(f"{differences.mean():.2f} ± {half:.2f} (")
    paired_figure = "fedavg/global_acc_mean_vs_fedvpt_prompt_length_2"
    assert figures[paired_figure] == pytest.approx(differences.mean())
    assert figures[f"{paired_figure}_ci95"] == pytest.approx(half)
    assert not [name for name in figures if name.startswith("fedvpt_prompt_length_2/") and "_vs_" in name]  # first

    # resumed after a kill: its process gone, a cell left RUNNING and one not finished (FAILED) runs again
    experiment = client.get_experiment_by_name(NAME).experiment_id
    stale = client.create_run(experiment, run_name="fedavg/s1", tags={"raysim.compare": NAME}).info.run_id
    failed = next(r for r in cells if r.data.tags["raysim.cell"] == "fedavg/s1")
    client.set_terminated(failed.info.run_id, status="FAILED")
    again = CliRunner().invoke(main, [*COMMAND, "--tracking-uri", tracking_uri])
    assert again.exit_code == 0, again.stderr
    assert sum(line.startswith("started ") for line in again.stderr.splitlines()) == 1  # only fedavg/s1
    rerun = next(r for r in _cells(client)[1] if r.info.run_name == "fedavg/s1" and r.info.status == "FINISHED")

    def computed(run):  # its metrics less the timings
        return {k: v for k, v in run.data.metrics.items() if not k.endswith("_s") and "time" not in k}

    assert computed(rerun) == computed(failed) and "summary/global_acc_mean" in computed(rerun)  # seed for seed
    assert client.get_run(stale).info.status == "KILLED"
    cells_after = _cells(client)[1]
    assert client.get_run(stale).info.end_time <= rerun.info.start_time  # ended before the rerun, not after it
    shown = CliRunner().invoke(main, ["report", NAME, "--tracking-uri", tracking_uri, "--out", str(tmp_path / "r")])
    assert shown.exit_code == 0 and _row(shown.stdout, VARIANT) == _row(report, VARIANT)
    assert (tmp_path / "r" / "report.md").read_text() == report  # the same pairing as the command's own report

    # while one process runs the comparison, a second stops before it touches a cell; once the first is gone, it runs
    with sole_runner(tmp_path / "compare" / NAME, "the first", "resume it"):
        second = CliRunner().invoke(main, [*COMMAND, "--tracking-uri", tracking_uri])
    assert second.exit_code == 2 and len(own_lines(second.stderr)) == 1, second.stderr
    assert f"comparison {NAME!r} is running in process {os.getpid()}" in second.stderr
    assert {r.info.run_id for r in _cells(client)[1]} == {r.info.run_id for r in cells_after}
    one_seed = [*COMMAND[: COMMAND.index("--seeds") + 1], "1", *COMMAND[COMMAND.index("--seeds") + 2 :]]
    assert CliRunner().invoke(main, [*one_seed, "--tracking-uri", tracking_uri]).exit_code == 0
    tags = _cells(client)[0].data.tags  # the own run says what the last command asked for
    assert (tags["compare.seeds"], tags["compare.methods"]) == ("1", f"{VARIANT} fedavg")
    assert tags["mlflow.note.content"].startswith(f"raysim compare {VARIANT} fedavg: seeds [0]; ")

    # its methods in another order, in its experiment, would pair them with another: refused before any run
    other = ["compare", "fedavg", VARIANT, *COMMAND[3:], "--experiment", NAME, "--tracking-uri", tracking_uri]
    refused = CliRunner().invoke(main, other)
    assert refused.exit_code == 2 and own_lines(refused.stderr) == [
        f"raysim: error: experiment {NAME!r} holds the comparison {VARIANT} fedavg, paired with {VARIANT}; name "
        f"{VARIANT} first to resume or extend it, or a new comparison with --experiment NAME"
    ], refused.stderr
    assert {r.info.run_id for r in _cells(client)[1]} == {r.info.run_id for r in cells_after}


def test_a_tuning_budget_tunes_every_method_alike_and_runs_its_best_values(ray_session, tracking_uri):
    args = [*COMMAND[:6], "1", *COMMAND[7:], "--tune-budget", "1", "--experiment", "budget", "--tracking-uri"]
    folder = Path(tracking_uri.removeprefix("sqlite:///")).parent / "compare" / "budget"
    folder.mkdir(parents=True)  # as a comparison killed before Tune first saved fedavg's sweep leaves it
    (folder / "tuning.json").write_text(json.dumps({"fedavg": str(folder / "killed-sweep")}))
    result = CliRunner().invoke(main, [*args, tracking_uri])
    assert result.exit_code == 0, result.output + result.stderr
    shown = result.stderr.splitlines()  # each method's sweep opens with what it samples, then its trial's lines
    assert f"the tuning of fedavg in {folder / 'killed-sweep'} cannot be resumed: tuning it anew" in shown
    assert [line.split(" trial sampling ")[0] for line in shown if line.startswith("tuning ")] == [
        f"tuning {VARIANT}: 1",
        "tuning fedavg: 1",
    ]
    started = [line for line in shown if line.startswith("started trial 1 of 1: ")]
    assert len(started) == 2 and all("train.lr=" in line for line in started)
    client = MlflowClient(tracking_uri)
    own, cells = _cells_of(client, "budget")
    assert own.data.params["compare.tune_budget"] == "1" and len(cells) == 2
    tuning = client.search_runs([client.get_experiment_by_name("budget-tuning").experiment_id])
    sampled = {"fedvpt": ("train.optimizer", "train.lr"), "fedavg": ("train.lr",)}  # less the arm's prompt_length
    trials = [r for r in tuning if r.data.tags.get("raysim.trial")]
    assert {r.data.params["data.holdout"] for r in trials} == {"validation"}  # the test rows never rank a trial
    best = {r.data.tags["method"]: {key: r.data.params[key] for key in sampled[r.data.tags["method"]]} for r in trials}
    assert len(best) == 2 and best["fedvpt"]["train.lr"] != best["fedavg"]["train.lr"]  # each its own space's draw
    for cell in cells:  # the best (here: the only) trial's values, on every seed
        method = cell.data.tags["method"]
        assert {key: cell.data.params[key] for key in sampled[method]} == best[method]
        assert cell.data.params["data.holdout"] == "test"
        assert {key: str(value) for key, value in json.loads(cell.data.tags["raysim.tuned"]).items()} == best[method]
    assert cell.data.tags["raysim.tuning"].startswith("1 raysim tune trials per method")
    assert cell.data.tags[TUNING_SEED] == "0" and tuning_seeds([{"tags": cell.data.tags}]) == {0}
    assert set(json.loads((folder / "tuned.json").read_text())) == {VARIANT, "fedavg"}
    assert json.loads((folder / "scored.json").read_text()) == {VARIANT: "validation", "fedavg": "validation"}
    assert "mean on validation rows" in cell.data.tags["raysim.tuning"]
    assert json.loads((folder / "tuning.json").read_text()) == {}  # no tuning left to resume


BAD = [
    (["fedavg"], "needs at least two methods"),
    (["fedavg", "nosuch"], "unknown method 'nosuch'"),
    (["fedavg", "fedvpt", "--seeds", "0"], "--seeds 0 must be at least 1"),
    (["fedavg", "fedavg"], "names one twice"),
    (["fedavg", "fedvpt:prompt_length"], "'prompt_length' must be KEY=VALUE"),
    (["fedavg", "fedvpt:prompt_length=0"], "prompt_length=0 must be at least 1"),
    (["fedavg", "fedvpt:data.alpha=0.1"], "data.alpha changes the clients' data"),
    (["fedavg", "fedvpt", "--partition", "iid", "--set", "data.alpha=0.1"], "drop data.alpha, or set data.partition"),
    (["fedavg", "sgpt", "--tune-budget", "-1"], "--tune-budget -1 must be 0"),
    (["fedavg", "sgpt", "--max-concurrent", "0"], "--max-concurrent 0 must be at least 1"),
    (["fedavg", "sgpt:resources.workers=3"], "sgpt:resources.workers=3: resources.workers changes what a cell"),
    (["fedavg", "fedv", "--set", "resources.server_cpus=1"], "fedv's server runs inside each trial's placement"),
    (["fedvpt", "fedgcr", "--partition", "dirichlet"], "fedgcr reports sigma_type and cluster_acc per client type"),
]


def test_every_methods_tuning_is_checked_before_the_first_is_tuned(ray_session, tmp_path):
    """The second method's space (nothing left to tune) is refused at once, not after the first method's tuning."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["compare", "fedvpt", "fedavg:train.lr=0.01", "--tune-budget", "1", "--tracking-uri", uri]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and len(own_lines(result.stderr)) == 1, result.stderr
    assert "fedavg:train.lr=0.01 sets every key of fedavg.yaml itself: nothing is left to tune" in result.stderr
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_comparisons_stop_with_one_line_before_any_run(tmp_path, args, message):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = CliRunner().invoke(main, ["compare", *args, "--tracking-uri", uri])
    assert result.exit_code == 2 and message in result.stderr and len(own_lines(result.stderr)) == 1
    assert not (tmp_path / "mlflow.db").exists()  # stopped before the store was touched
