"""Search-space files: the YAML grammar, its mapping onto Tune's samplers, and errors that name file and key."""

from __future__ import annotations

import os

import pytest

from raysim.base.errors import ConfigError
from raysim.config import build_config, yaml12
from raysim.core.registry import METHODS
from raysim.sweep.space import (
    as_layer,
    corners,
    default_space_file,
    load_space,
    shipped_spaces,
    with_private_levers,
)

PRIVATE = {"privacy": {"mode": "user", "target_epsilon": 4.0, "delta": 1e-5}}


def space_file(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_samplers_map_onto_tune_with_inclusive_randint(tmp_path):
    from ray import tune

    path = space_file(
        tmp_path,
        "fixed: {federation.rounds: 4}\nspace:\n"
        "  fedgcr.clusters: {randint: [3, 5]}\n  fedgcr.q: {choice: [0.5, 2]}\n"
        "  train.lr: {loguniform: [1.0e-4, 1.0e-2]}\n  fedgcr.delta: {uniform: [0.2, 0.4]}\n"
        "  fedgcr.gamma: {grid: [0.1, 0.9]}\n",
    )
    space = load_space(path, "fedgcr", [], [])
    assert space.fixed == {"federation.rounds": 4}
    tuned = space.tune_space()
    assert isinstance(tuned["fedgcr.clusters"], tune.search.sample.Integer)
    assert (tuned["fedgcr.clusters"].lower, tuned["fedgcr.clusters"].upper) == (3, 6)  # Tune's upper is exclusive
    assert tuned["fedgcr.q"].categories == [0.5, 2]
    assert (tuned["fedgcr.delta"].lower, tuned["fedgcr.delta"].upper) == (0.2, 0.4)
    assert tuned["fedgcr.gamma"] == {"grid_search": [0.1, 0.9]}
    draws = {tuned["fedgcr.clusters"].sample() for _ in range(200)}
    assert draws == {3, 4, 5}


BAD = [
    ("space:\n  fedgcr.deltaa: {uniform: [0, 1]}\n", "space key 'fedgcr.deltaa' = 0: unknown key fedgcr.deltaa"),
    (
        "space:\n  fedgcr.delta: {uniform: [0, 1.5]}\n",
        "space key 'fedgcr.delta' = 1.5: fedgcr.delta=1.5 must be in [0, 1]",
    ),
    ("space:\n  fedgcr.delta: {uniform: [0.5, 0.5]}\n", "uniform bounds [0.5, 0.5] need low < high"),
    ("space:\n  train.lr: {loguniform: [0, 1]}\n", "loguniform bounds [0, 1] must be > 0"),
    ("space:\n  fedgcr.clusters: {randint: [3, 4.5]}\n", "randint bounds must be integers"),
    ("space:\n  fedgcr.q: {normal: [0, 1]}\n", "valid samplers: choice, grid, uniform, loguniform, randint"),
    ("space:\n  fedgcr.q: {choice: []}\n", "choice needs a non-empty list of values"),
    ("space:\n  fedgcr.q: {choice: [1, -1]}\n", "space key 'fedgcr.q' = -1: fedgcr.q=-1.0 must be >= 0"),
    ("space:\n  rounds: {choice: [1]}\n", "space key 'rounds' must look like section.key"),
    ("fixed: {federation.rounds: 0}\nspace:\n  fedgcr.q: {choice: [1]}\n", "fixed key 'federation.rounds' = 0"),
    ("space: {}\n", "must have a non-empty 'space:' mapping"),
    ("spaces:\n  fedgcr.q: {choice: [1]}\n", "must have a non-empty 'space:' mapping"),
    ("space:\n  fedgcr.q: {choice: [1]}\nextra: 1\n", "unknown top-level key 'extra'"),
    ("space: [\n", "is not valid YAML: expected the node content, but found '<stream end>' (line 2, column 1)"),
    (
        "space:\n  fedgcr.clusters: {uniform: [3, 6]}\n",
        "uniform draws values such as 5.121, which fedgcr.clusters refuses (fedgcr.clusters=5.12",
    ),
    ("space:\n  fedgcr.q: {choice: [1]}\n  fedgcr.q: {choice: [2]}\n", "key 'fedgcr.q' is given twice in one mapping"),
]


@pytest.mark.parametrize("text, fragment", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_space_files_name_the_file_and_key(tmp_path, text, fragment):
    path = space_file(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_space(path, "fedgcr", [{"data": {"partition": "domains"}}], [])
    assert fragment in str(error.value) and str(path) in str(error.value)


def test_every_shipped_space_is_valid_for_its_methods():
    from raysim.sweep.tune import refuse_unrunnable_corners

    methods = list(METHODS)
    shipped = list(shipped_spaces())
    assert "fedavg" in shipped and "privacy" not in shipped
    covered = []
    for method in methods:
        try:
            path = default_space_file(method)
        except ConfigError as error:
            assert "no search space ships" in str(error) and ", ".join(shipped) in str(error)
            continue
        refuse_unrunnable_corners(method, load_space(path, method, [], []), [])
        covered.append(method)
    assert {"sgpt", "fgpt", "fgpt-u", "fedgcr", "fedgc", "fedgr", "fedprox", "qffl", "fedvz", "ditto"} <= set(covered)
    assert {"fedmix", "fedsam", "moon", "harmofl", "pfedhn", "pfedpg", "fedem", "fedpr", "fed-dualprompt"} <= set(
        covered
    )
    # a method samples none of the options it ignores: FGPT's K (it takes the top group), FedGC's reweighting,
    # FedGR's prompt losses; FGPT-U and FedGCR sample them
    ignored = {"fgpt": {"fgpt.k"}, "fedgc": {"fedgcr.delta", "fedgcr.q", "fedgcr.gamma"}}
    ignored["fedgr"] = {"fedgcr.lambda1", "fedgcr.lambda2"}
    for method, keys in ignored.items():
        assert not set(load_space(default_space_file(method), method, [], []).samplers) & keys, method
    assert "fgpt.k" in load_space(default_space_file("fgpt-u"), "fgpt-u", [], []).samplers
    assert {*ignored["fedgc"], *ignored["fedgr"]} <= set(
        load_space(default_space_file("fedgcr"), "fedgcr", [], []).samplers
    )


def test_every_shipped_space_samples_the_client_lr_and_comparison_partners_sample_it_alike():
    """An equal tuning budget is fair only if no method's search has a lever its partner's lacks: every method trains
    on clients, so every space samples train.lr; the methods compared in docs/evidence.md's tuned tables (and the
    FedV table's other baselines) sample the client's training levers over the same ranges."""
    spaces = {name: yaml12.load(path.read_text())["space"] for name, path in shipped_spaces().items()}
    assert [name for name, space in spaces.items() if "train.lr" not in space] == []
    prompts = {"train.optimizer": {"choice": ["sgd", "adamw"]}, "train.lr": {"loguniform": [3e-4, 3e-2]}}
    split = {"train.lr": {"loguniform": [1e-4, 1e-2]}}
    for partners, expected in (
        (("sgpt", "fgpt", "fedvpt"), prompts),
        (("fedgcr", "qffl", "fedvpt"), prompts),
        (("fedv", "fedvz", "festa", "fedavg", "ditto", "fedrod"), split),
    ):
        levers = {name: {k: v for k, v in spaces[name].items() if k.startswith("train.")} for name in partners}
        assert levers == dict.fromkeys(partners, expected)


def test_a_grid_runs_all_its_values_per_sample_and_the_plan_counts_every_trial(tmp_path):
    """Ray Tune repeats a grid ``num_samples`` times: 2 samples over a 3-value grid are 6 trials, not 2."""
    from raysim.sweep.tune import Sweep

    path = space_file(tmp_path, "space:\n  fedprox.mu: {grid: [0.01, 0.1, 1.0]}\n  train.lr: {choice: [0.1, 0.2]}\n")
    space = load_space(path, "fedprox", [], [])
    sweep = Sweep("fedprox", "s", [], [], space, "global_acc", "max", 2, 1, "fifo", str(tmp_path))
    assert space.grid_points() == 3 and sweep.trials == 6
    line = sweep.plan_line()
    assert line.startswith("6 trials (2 samples x 3 grid points) sampling fedprox.mu grid"), line


def test_the_line_of_what_every_trial_runs_names_no_key_the_trials_sample(tmp_path):
    from raysim.sweep.tune import Sweep

    path = space_file(tmp_path, "fixed: {federation.rounds: 4}\nspace:\n  train.lr: {loguniform: [1.0e-4, 1.0e-2]}\n")
    preset = {"train": {"lr": 0.05, "local_epochs": 2}}  # the preset sets the sampled key and one the trials share
    space = load_space(path, "fedvpt", [preset], [])
    sweep = Sweep("fedvpt", "s", [preset], [], space, "global_acc", "max", 2, 1, "fifo", str(tmp_path))
    each_trial = sweep.plan_line().split("; each trial ")[1]
    assert "train.local_epochs=2" in each_trial and "train.lr" not in each_trial, each_trial


def test_private_trials_also_sample_the_clip_and_nothing_else_changes(tmp_path):
    from raysim.sweep.tune import Sweep

    shipped = load_space(default_space_file("fedvpt"), "fedvpt", [], [PRIVATE])
    private = with_private_levers(shipped, "fedvpt", [], [PRIVATE])
    assert private.source.endswith("fedvpt.yaml+privacy.yaml") and private.fixed == shipped.fixed
    assert private.samplers == {**shipped.samplers, "privacy.clip": ("loguniform", [0.01, 10.0])}
    sweep = Sweep("fedvpt", "s", [], [PRIVATE], private, "global_acc", "max", 2, 1, "fifo", str(tmp_path))
    trial = sweep.trial_config({"privacy.clip": 0.37, "train.lr": 0.001})
    assert (trial.privacy.clip, trial.privacy.target_epsilon) == ("0.37", 4.0)
    assert "(fedvpt.yaml+privacy.yaml)" in sweep.plan_line()


@pytest.mark.parametrize(
    "after",
    [[], [{"privacy": {**PRIVATE["privacy"], "clip": "adaptive:0.5"}}]],
    ids=["not private", "the clip set by --set"],
)
def test_the_clip_is_left_alone_where_trials_are_not_private_or_the_user_set_it(after):
    shipped = load_space(default_space_file("fedavg"), "fedavg", [], after)
    assert with_private_levers(shipped, "fedavg", [], after) == shipped


def test_corners_are_every_value_and_both_ends_or_every_pairs_where_the_product_is_large(tmp_path):
    path = space_file(
        tmp_path,
        "space:\n  fgpt.groups: {choice: [2, 5]}\n  fgpt.k: {randint: [1, 3]}\n  train.lr: {grid: [0.1, 0.01]}\n",
    )
    space = load_space(path, "fgpt-u", [], [])
    points = corners(space)
    assert len(points) == 8 and {"fgpt.groups": 2, "fgpt.k": 3, "train.lr": 0.01} in points
    pairs = corners(space, limit=7)  # three pairs of keys, four points each; the third key at its first value
    assert len(pairs) == 12 and {"fgpt.groups": 2, "fgpt.k": 3, "train.lr": 0.1} in pairs
    assert {"fgpt.groups": 5, "fgpt.k": 1, "train.lr": 0.01} in pairs


def test_a_space_that_can_sample_a_trial_its_method_refuses_is_one_line(tmp_path):
    from raysim.sweep.tune import plan

    path = space_file(tmp_path, "space:\n  fgpt.groups: {choice: [2, 5]}\n  fgpt.k: {randint: [1, 3]}\n")
    with pytest.raises(ConfigError) as error:
        plan("fgpt-u", path, 2, None, "global_acc", "max", "fifo", None, None, [])
    assert str(error.value) == (
        "space.yaml: the space can sample fgpt.groups=2, fgpt.k=3, which no trial could run (fgpt.k=3 must be in "
        "1..groups=2 (top-K of the G groups at inference)); narrow the space"
    )


def test_an_error_of_the_flags_themselves_is_not_blamed_on_the_spaces_first_key(tmp_path):
    path = space_file(tmp_path, "fixed: {federation.rounds: 10}\nspace:\n  train.lr: {choice: [0.1]}\n")
    flags = {"federation": {"mode": "async", "buffer": 5, "concurrency": 2}, "systems": {"speed": "lognormal:3,0.5"}}
    with pytest.raises(ConfigError) as error:
        load_space(path, "fedvpt", [], [flags])
    assert str(error.value).startswith("federation.buffer=5 is more than the 2 clients in flight")
    with pytest.raises(ConfigError, match=r"space.yaml: fixed key 'federation.rounds' = 0: federation.rounds=0 must"):
        load_space(
            space_file(tmp_path, "fixed: {federation.rounds: 0}\nspace:\n  train.lr: {choice: [0.1]}\n"),
            "fedvpt",
            [],
            [],
        )


def test_a_space_that_samples_the_privacy_budget_is_one_line(tmp_path):
    from raysim.sweep.tune import plan

    path = space_file(tmp_path, "space:\n  privacy.target_epsilon: {choice: [1.0, 8.0]}\n  train.lr: {choice: [0.1]}\n")
    with pytest.raises(ConfigError, match="sets the privacy budget, and a sweep ranks its trials by accuracy"):
        plan("fedavg", path, 2, None, "global_acc", "max", "fifo", None, None, [PRIVATE])


@pytest.mark.parametrize(
    "mode, key, values",
    [("user", "federation.participation", "[0.2, 1.0]"), ("record", "train.local_epochs", "[1, 20]")],
)
def test_a_space_that_samples_what_the_accountant_reads_at_a_fixed_noise_is_one_line(tmp_path, mode, key, values):
    """At a fixed noise multiplier each trial would spend another epsilon; under a target epsilon each calibrates
    its own noise to it, so the same space plans."""
    from raysim.sweep.tune import refuse_spending_samplers

    fixed = {"privacy": {"mode": mode, "noise_multiplier": 1.0, "delta": 1e-5}, "federation": {"clients": 10}}
    path = space_file(tmp_path, f"space:\n  {key}: {{choice: {values}}}\n  train.lr: {{choice: [0.1]}}\n")
    space = load_space(path, "fedavg", [], [fixed])
    with pytest.raises(ConfigError, match=f"space key '{key}' changes the epsilon each trial spends at privacy"):
        refuse_spending_samplers(space, build_config("fedavg", [fixed]))
    target = {**fixed, "privacy": {"mode": mode, "target_epsilon": 4.0, "delta": 1e-5}}
    refuse_spending_samplers(space, build_config("fedavg", [target]))
    refuse_spending_samplers(space, build_config("fedavg", [{"federation": {"clients": 10}}]))


def test_a_trial_reads_the_files_the_command_named_from_its_own_folder(tmp_path, monkeypatch):
    """Tune runs each trial in a folder of its own: the relative --weights and --data-dir of the command are pinned
    to where the command ran."""
    from raysim.sweep.tune import pinned_layer

    (tmp_path / "cli").mkdir()
    (tmp_path / "trial").mkdir()
    (tmp_path / "cli" / "w.safetensors").write_bytes(b"")
    monkeypatch.chdir(tmp_path / "cli")
    flags = [
        {"model": {"weights": "w.safetensors"}, "data": {"dataset": "parquet", "data_dir": "rows.parquet"}},
        {"tracking": {"tracking_uri": f"sqlite:///{tmp_path}/m.db"}},
    ]
    after = [*flags, pinned_layer(build_config("fedvpt", flags), "exp")]
    monkeypatch.chdir(tmp_path / "trial")
    trial = build_config("fedvpt", after)
    assert (trial.model.weights, trial.data.data_dir) == (
        str(tmp_path / "cli" / "w.safetensors"),
        str(tmp_path / "cli" / "rows.parquet"),
    )


def test_a_space_whose_samples_replace_the_defaults_its_method_refuses_is_planned(tmp_path):
    """fgpt.k's default 5 is above the space's fixed fgpt.groups 3, and no trial keeps it: every K the space samples
    fits, so the sweep starts (its trials' own configs are checked as each run starts)."""
    from raysim.sweep.tune import refuse_unrunnable_corners

    path = space_file(tmp_path, "fixed: {fgpt.groups: 3}\nspace:\n  fgpt.k: {choice: [1, 2, 3]}\n")
    space = with_private_levers(load_space(path, "fgpt-u", [], []), "fgpt-u", [], [])
    refuse_unrunnable_corners("fgpt-u", space, [as_layer(space.fixed)])
    (tmp_path / "wider").mkdir()
    wider = load_space(space_file(tmp_path / "wider", "space:\n  fgpt.k: {choice: [1, 4]}\n"), "fgpt-u", [], [])
    with pytest.raises(ConfigError, match=r"can sample fgpt.k=4, which no trial could run \(fgpt.k=4 must be in"):
        refuse_unrunnable_corners("fgpt-u", wider, [as_layer(space.fixed)])


def test_a_space_file_that_is_no_regular_file_is_one_line_not_a_wait(tmp_path):
    """A FIFO's open waits for a writer, a device reads without end."""
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", "/dev/zero", tmp_path):
        with pytest.raises(ConfigError, match=f"search space file {path} (is not a regular file|is a folder)"):
            load_space(str(path), "fedvpt", [], [])
