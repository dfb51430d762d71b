"""The arms of ``raysim compare``: ``METHOD:KEY=VALUE`` parsing, the search space an arm tunes (its method's, less
what the arm sets itself), the rows its trials are scored on, and the cells a stopped comparison leaves behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from raysim.base.errors import ConfigError
from raysim.sweep.compare import (
    Comparison,
    arm,
    arm_space,
    default_name,
    end_stopped_cells,
    folder_name,
    refuse_other_settings,
    scoring,
    tuned_values,
    tuning_plan,
)
from raysim.sweep.space import default_space_file, load_space
from raysim.tracking import provenance
from raysim.tracking.mlflow import COMPARE, KIND


def test_an_arm_is_a_method_and_its_own_settings():
    assert arm("sgpt") == ("sgpt", {})
    method, layer = arm("sgpt:head_pooling=cls:train.lr=0.01:shared_blocks=[0, 1]")
    assert method == "sgpt"
    assert layer == {"sgpt": {"head_pooling": "cls", "shared_blocks": [0, 1]}, "train": {"lr": 0.01}}
    method, layer = arm("fedvpt:systems.speed=lognormal:3,0.5:federation.deadline_s=20:systems.uplink=uniform:1,2")
    assert layer["systems"] == {"speed": "lognormal:3,0.5", "uplink": "uniform:1,2"}
    assert layer["federation"] == {"deadline_s": 20}


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("nosuch", "unknown method 'nosuch'"),
        ("sgpt:groups", "'groups' must be KEY=VALUE"),
        ("sgpt:groups=5:groups=6", "'sgpt:groups=5:groups=6' sets sgpt.groups twice; give each key once"),
        ("fedprox:train.lr=0.1:train.lr=0.2", "sets train.lr twice"),
    ],
)
def test_a_bad_arm_is_one_line(label, message):
    with pytest.raises(ConfigError, match=message):
        arm(label)


@pytest.mark.parametrize(
    ("preset", "name"),
    [
        ("offline-dir0.3", "compare-fedv-fedavg-offline-dir0.3"),
        ("runs/my-setting.yaml", "compare-fedv-fedavg-my-setting"),
        ("my.setting.yml", "compare-fedv-fedavg-my.setting"),
        (None, "compare-fedv-fedavg"),
    ],
)
def test_a_comparison_is_named_by_its_methods_and_its_whole_preset_name(preset, name):
    assert default_name(("fedv", "fedavg"), preset) == name


def comparison(tmp_path) -> Comparison:
    return Comparison("c", ("sgpt", "fedavg"), (0,), None, [], {}, 2, str(tmp_path))


def test_an_arm_that_names_its_precision_keeps_it_and_the_others_take_the_pinned_one(tmp_path):
    pinned = {"train": {"precision": "fp32"}, "federation": {"rounds": 2}}
    both = Comparison("c", ("fedvpt", "fedvpt:train.precision=bf16"), (0, 1), None, [], pinned, 0, str(tmp_path))
    plain, bf16 = (both.config(label, 1, {}) for label in both.methods)
    assert (plain.train.precision, bf16.train.precision) == ("fp32", "bf16")
    assert plain.federation.rounds == bf16.federation.rounds == 2 and bf16.federation.seed == 1


def test_an_arm_tunes_its_space_less_the_keys_it_sets_at_the_comparisons_setting(tmp_path):
    """The space's fixed values (sgpt: 10 rounds; fedgcr: digits5 over 22 clients) would tune an arm at another
    setting than its cells run, and the methods at different settings from each other."""
    shipped = yaml.safe_load(Path(default_space_file("sgpt")).read_text())
    assert shipped["fixed"]
    full = yaml.safe_load(Path(arm_space(comparison(tmp_path), "sgpt")).read_text())
    assert full == {"space": shipped["space"]}
    own = yaml.safe_load(Path(arm_space(comparison(tmp_path), "sgpt:groups=5:alpha_k=0.2")).read_text())
    assert set(own["space"]) == set(shipped["space"]) - {"sgpt.groups", "sgpt.alpha_k"} and "fixed" not in own


def test_an_arm_draws_its_grid_keys_as_choices_so_that_its_budget_is_its_trials(tmp_path):
    """Tune runs every grid value for each sample: ditto.yaml's 4-value lambda grid would give Ditto 4 x the
    budget's trials, the other methods 1 x."""
    shipped = load_space(default_space_file("ditto"), "ditto", [], [])
    assert shipped.grid_points() == 4
    drawn = load_space(arm_space(comparison(tmp_path), "ditto"), "ditto", [], [])
    assert drawn.grid_points() == 1 and drawn.samplers["ditto.lam"] == ("choice", shipped.samplers["ditto.lam"][1])
    assert drawn.samplers["train.lr"] == shipped.samplers["train.lr"] and drawn.fixed == {}


def test_an_arm_that_sets_every_tuned_key_has_nothing_to_tune(tmp_path):
    with pytest.raises(ConfigError, match="sets every key of fedavg.yaml itself"):
        arm_space(comparison(tmp_path), "fedavg:train.lr=0.01")


def test_the_tuning_says_which_rows_scored_each_methods_trials(tmp_path):
    """New tunings score on validation rows; a method a comparison tuned before that record (2026-11-29) was scored
    on the test rows, and its cells and report say so, not what the code does now."""
    tuned = Comparison("c", ("sgpt", "fedavg"), (3, 4), None, [], {}, 4, str(tmp_path))
    assert scoring(tuned) == {"sgpt": "validation", "fedavg": "validation"}
    assert (
        "on seed 3, ranked by global_acc's last-10 mean on validation rows (a fifth of the training rows; the test"
        " rows unseen);" in tuned.tuning(scoring(tuned))
    )
    (tmp_path / "tuned.json").write_text(json.dumps({"sgpt": {"train.lr": 0.1}}))  # tuned before the record
    assert scoring(tuned) == {"sgpt": "test", "fedavg": "validation"}
    assert "mean on fedavg validation rows (a fifth" in tuned.tuning(scoring(tuned))
    assert "mean on the test rows;" in tuned.tuning({"sgpt": "test"})
    (tmp_path / "scored.json").write_text(json.dumps({"sgpt": "validation"}))
    assert scoring(tuned) == {"sgpt": "validation", "fedavg": "validation"}
    untuned = Comparison("c", ("sgpt", "fedavg"), (3, 4), None, [], {}, 0, str(tmp_path))
    assert untuned.tuning({}) == "presets (no tuning)" and scoring(untuned) == {}


def test_a_finished_tuning_is_reused_only_at_the_budget_and_setting_it_ran(tmp_path):
    def comparison_with(budget: int, flags: list[dict]) -> Comparison:
        return Comparison("c", ("sgpt", "fedavg"), (3, 4), None, flags, {}, budget, str(tmp_path))

    before = comparison_with(4, [{"federation": {"rounds": 5}}])
    values = {"sgpt": {"train.lr": 0.1}, "fedavg": {"train.lr": 0.01}}
    (tmp_path / "tuned.json").write_text(json.dumps(values))
    plans = {label: tuning_plan(before, label) for label in before.methods}
    (tmp_path / "plans.json").write_text(json.dumps(plans))
    assert tuned_values(before)[0] == values  # nothing is tuned again
    elsewhere = comparison_with(4, [{"federation": {"rounds": 5}, "resources": {"workers": 2}}])
    assert tuned_values(elsewhere)[0] == values  # other resources, the same numbers
    for changed in (comparison_with(16, [{"federation": {"rounds": 5}}]), comparison_with(4, [])):
        with pytest.raises(ConfigError, match="comparison c tuned sgpt with 4 trials at the setting it had then"):
            tuned_values(changed)


def test_a_stopped_tuning_resumes_only_at_the_budget_and_setting_it_started_with(tmp_path):
    """A tuning stopped mid-way (tuning.json names its sweep) under another budget would finish that sweep and be
    recorded as the new budget's: refused before anything resumes."""
    before = Comparison("c", ("sgpt", "fedavg"), (3, 4), None, [], {}, 4, str(tmp_path))
    (tmp_path / "a-stopped-sweep").mkdir()
    (tmp_path / "a-stopped-sweep" / "tuner.pkl").write_bytes(b"")  # what Tune restores from: it has saved its state
    (tmp_path / "tuning.json").write_text(json.dumps({"sgpt": str(tmp_path / "a-stopped-sweep")}))
    (tmp_path / "plans.json").write_text(json.dumps({"sgpt": tuning_plan(before, "sgpt")}))
    changed = Comparison("c", ("sgpt", "fedavg"), (3, 4), None, [], {}, 16, str(tmp_path))
    with pytest.raises(ConfigError, match=r"comparison c was tuning sgpt with 4 trials at the setting it had then; "):
        tuned_values(changed)


def test_cells_a_stopped_comparison_left_running_end_killed(tracking_uri):
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("c")
    tags = {"raysim.compare": "c"}
    own, stopped, done, other = (client.create_run(experiment, tags=t) for t in (tags, tags, tags, {}))
    client.set_terminated(done.info.run_id, status="FINISHED")
    pinned = {"tracking": {"tracking_uri": tracking_uri}}
    end_stopped_cells(Comparison("c", ("fedavg",), (0,), None, [], pinned, 0, "unused"), own.info.run_id)
    status = {run: client.get_run(run.info.run_id).info.status for run in (own, stopped, done, other)}
    assert [status[r] for r in (own, stopped, done, other)] == ["RUNNING", "KILLED", "FINISHED", "RUNNING"]


def test_a_comparison_into_an_experiment_of_other_settings_is_refused_before_it_tunes(tracking_uri, tmp_path):
    """A finished cell is checked against this comparison tuned to the cell's own recorded values, so another setting
    (here 5 rounds, not 3) stops before any trial runs; the same setting passes, whatever its tuning found."""
    pinned = {"tracking": {"tracking_uri": tracking_uri}}

    def comparison_of(rounds: int) -> Comparison:
        flags = [{"federation": {"rounds": rounds}}]
        return Comparison("c", ("fedavg",), (0,), None, flags, pinned, 4, str(tmp_path))

    tuned = {"train.lr": 0.01}
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("c")
    tags = {
        "raysim.compare": "c",
        "method": "fedavg",
        "seed": "0",
        "raysim.config_hash": provenance.config_hash(comparison_of(3).config("fedavg", 0, tuned)),
        "raysim.tuned": json.dumps(tuned),
    }
    cell = client.create_run(experiment, tags=tags)
    own = client.create_run(experiment, tags={"raysim.compare": "c", KIND: COMPARE})  # the comparison's, finished
    for run in (cell, own):
        client.set_terminated(run.info.run_id, status="FINISHED")
    refuse_other_settings(comparison_of(3))
    with pytest.raises(ConfigError, match="experiment 'c' already holds a comparison of other settings"):
        refuse_other_settings(comparison_of(5))
    untuned = Comparison("c", ("fedavg",), (0,), None, [{"federation": {"rounds": 3}}], pinned, 0, str(tmp_path))
    with pytest.raises(ConfigError, match="already holds a comparison of other settings"):
        refuse_other_settings(untuned)  # its cell was tuned; this comparison would not tune


def test_a_long_comparison_gets_a_short_folder_that_stays_unique():
    arms = tuple(f"fedvpt:compression.uplink=qsgd:{bits}" for bits in range(1, 9))
    name = default_name(("fedvpt", *arms), "digits-iid")
    folder = folder_name(name)
    assert len(name) > 255 and len(folder) == 100 and folder.startswith("compare-fedvpt-fedvpt:compression")
    assert folder_name(default_name(("fedvpt", *arms[:-1], "fedvpt:compression.uplink=qsgd:9"), "digits-iid")) != folder
    assert folder_name("compare-fedv-fedavg") == "compare-fedv-fedavg"
    assert folder_name("compare-fedvpt:systems.trace=/data/t.csv") == "compare-fedvpt:systems.trace=_data_t.csv"
