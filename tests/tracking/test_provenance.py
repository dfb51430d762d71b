"""What names and traces a run: names that identify a config, the description, provenance tags, the data's digest.
Pure functions of the config (no Ray, no store); the runs themselves are checked against real stores in tests/e2e."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from raysim.config import build_config, load_preset, preset_for_method
from raysim.data.shards import DatasetInfo, ShardStore
from raysim.tracking import provenance

QUICK = {
    "federation": {"clients": 20, "rounds": 3, "participation": 0.25},
    "data": {"dataset": "synthetic", "partition": "dirichlet", "alpha": 1.0},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
}


def name(method="fedvpt", *layers):
    return provenance.run_name(build_config(method, [QUICK, *layers]))


def test_the_same_config_gets_the_same_name_and_one_changed_option_another():
    digest = provenance.config_hash(build_config("fedvpt", [QUICK]))
    assert name() == name() == f"fedvpt-{digest}-s0-synthetic-dirichlet1-20c"
    changed = [
        {"train": {"lr": 0.01}},
        {"fedvpt": {"prompt_length": 3}},
        {"federation": {"seed": 1}},
        {"federation": {"clients": 10}},
        {"data": {"alpha": 0.1}},
        {"data": {"partition": "iid"}},
        {"train": {"precision": "bf16"}},
    ]
    names = {name("fedvpt", layer) for layer in changed}
    assert len(names) == len(changed) and name() not in names
    # what MLflow's runs table shows of a name (method, setting, seed) already tells any two apart
    assert len({n[: len("fedvpt-123456-s0")] for n in names | {name()}}) == len(changed) + 1
    assert name("fedvpt", {"federation": {"seed": 1}}).startswith(f"fedvpt-{digest}-s1-")  # one setting, two seeds
    # where and how a run goes does not change what it computes, nor its name
    placement = {"resources": {"workers": 3, "backend": "sequential"}, "tracking": {"experiment": "x"}}
    assert name("fedvpt", placement, {"checkpoint": {"every": 5}}) == name()


@pytest.mark.parametrize(
    "partition, layer, label",
    [
        ("iid", {}, "iid"),
        ("dirichlet", {"alpha": 0.1}, "dirichlet0.1"),
        ("pathological", {"s": 3}, "pathological3"),
        ("pachinko", {"beta": 0.5, "beta_fine": 10.0}, "pachinko0.5,10"),
        ("domains", {"dif": 10.0}, "domains10"),
    ],
)
def test_the_name_spells_the_partition_with_its_parameters(partition, layer, label):
    config = build_config("fedvpt", [QUICK, {"data": {"partition": partition, **layer}}])
    assert provenance.partition_label(config) == label
    assert provenance.run_name(config).endswith(f"-s0-synthetic-{label}-20c")


def test_the_evaluation_tag_says_when_accuracy_covers_a_sample_of_clients():
    assert provenance.evaluation(build_config("fedvpt", [QUICK])) == "all clients"
    sampled = build_config("fedvpt", [QUICK, {"federation": {"eval_clients": 8}}])
    assert provenance.evaluation(sampled).startswith("a fixed sample of 8 of 20 clients")
    every = build_config("fedvpt", [QUICK, {"federation": {"eval_clients": 0}}])
    assert provenance.evaluation(every) == "all clients"


def test_the_description_says_what_ran_and_what_was_set():
    given = build_config("sgpt", [QUICK, {"sgpt": {"groups": 4}, "federation": {"eval_every": 1}}])
    resolved = build_config("sgpt", [QUICK, {"sgpt": {"groups": 4}, "train": {"precision": "fp32"}}])
    text = provenance.describe(resolved, given)
    assert text == (
        "sgpt (group prompts) on synthetic, dirichlet alpha=1, 20 clients (5 per round) x 3 rounds, "
        "raysim_vit_nano_p4_16, fp32, seed 0; also federation.eval_every=1, model.pretrained=false, sgpt.groups=4"
    )
    assert "\n" not in text
    # a sweep's trials each draw their sampled keys: the line of what every trial runs leaves them out
    assert provenance.describe(resolved, given, sampled={"sgpt.groups"}).endswith(
        "; also federation.eval_every=1, model.pretrained=false"
    )


def test_provenance_names_the_command_the_checkout_and_the_machine(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/raysim", "run", "fedvpt", "--set", "data.alpha=0.1 "])
    tags = provenance.provenance_tags(uses_gpus=False)
    assert tags["mlflow.source.name"] == "raysim run fedvpt --set 'data.alpha=0.1 '"
    assert tags["mlflow.user"] and tags["hardware.cpu"] and "hardware.gpu" not in tags
    assert {"version.raysim", "version.torch", "version.ray", "version.mlflow"} <= set(tags)
    head = subprocess.run(
        ["git", "-C", str(provenance.PACKAGE_DIR), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if head:  # run from a checkout (not an installed wheel): the commit is the package's, whatever argv[0] is
        assert tags["mlflow.source.git.commit"] == head and tags["mlflow.source.git.dirty"] in ("true", "false")
    assert provenance.git_tags(Path("/proc")) == {}  # outside any checkout: no git tags, no error


def test_a_package_another_checkout_does_not_track_has_no_git_tags(tmp_path):
    """raysim installed in a virtual environment inside the user's own project: that project's commit is not the
    code that ran."""
    run = functools.partial(subprocess.run, check=True, capture_output=True, cwd=tmp_path)
    run(["git", "init", "-q"])
    (tmp_path / ".gitignore").write_text(".venv/\n")
    package = tmp_path / ".venv" / "site-packages" / "raysim"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    run(["git", "add", ".gitignore"])
    run(["git", "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "project"])
    assert provenance.git_tags(package) == {}
    run(["git", "add", "-f", ".venv"])  # a checkout that does hold the package
    run(["git", "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "vendored"])
    assert provenance.git_tags(package)["mlflow.source.git.dirty"] == "false"


def test_the_gpu_tag_names_the_first_gpu_the_driver_may_use_as_nvidia_smi_lists_it(tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"  # stands in for the real tool on a machine with two GPUs
    tool.write_text('#!/bin/sh\nprintf "0, GPU-3f2a, NVIDIA H200\\n1, GPU-9c41, NVIDIA H100 80GB HBM3\\n"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance.provenance_tags(uses_gpus=True)["hardware.gpu"] == "NVIDIA H200"
    for visible, named in [
        ("1", "NVIDIA H100 80GB HBM3"),
        ("GPU-9c41,0", "NVIDIA H100 80GB HBM3"),
        ("0", "NVIDIA H200"),
    ]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert provenance.gpu_model() == named, visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert provenance.gpu_model() == provenance.NO_DRIVER_GPU
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    tool.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 9\n")
    assert provenance.gpu_model() == "unknown (nvidia-smi failed: CalledProcessError)"
    tool.unlink()
    assert provenance.gpu_model() == provenance.NO_DRIVER_GPU


def _shards(labels) -> ShardStore:
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    return ShardStore(
        DatasetInfo("toy", 3, 1, (2, 2, 3)),
        np.arange(n * 12, dtype=np.uint8).reshape(n, 2, 2, 3),
        labels,
        np.zeros(n, dtype=np.int64),
        np.array([0, 2, 4]),
        np.array([4, 5, 6]),
        None,
        (),
    )


def test_the_dataset_input_carries_a_digest_of_the_partition():
    config = build_config("fedvpt", [QUICK])
    first = provenance.dataset_input(config, _shards([0, 1, 2, 0, 1, 2]))
    assert first.dataset.name == "synthetic" and len(first.dataset.digest) == 8
    assert first.dataset.digest == provenance.dataset_input(config, _shards([0, 1, 2, 0, 1, 2])).dataset.digest
    assert first.dataset.digest != provenance.dataset_input(config, _shards([0, 1, 2, 0, 1, 1])).dataset.digest
    assert [(t.key, t.value) for t in first.tags] == [("mlflow.data.context", "dirichlet1, 20 clients")]


PUBLISHED = [  # hashes of 45a766e (2026-11-29 morning): the old forms of the later keys, set by hand, keep them
    ("fedvpt", None, {}, "a6abab"),
    ("fedvpt", "offline-s10", {"data": {"class_sets": "ring"}}, "36b673"),
    ("fedvpt", "offline-digit5-dif10", {"federation": {"clients": 20}, "data": {"domain_order": "id"}}, "04cd9b"),
    ("fedvpt", None, {"data": {"dataset": "pacs", "partition": "domains", "dif": 10.0}}, "4f76ba"),  # no paper order
    ("sgpt", "offline-five-sources", {"federation": {"rounds": 30}}, "3d5c1d"),  # DIF 1: no domain is rarer
    ("fedvpt", None, {"data": {"partition": "pachinko", "pachinko": "proportional"}}, "bc49f8"),  # at 4e676fa
    ("pfedhn", None, {"pfedhn": {"evaluate": "trained"}}, "6869f3"),  # at 3a85a8b
]


def hashed(method: str, preset: str | None, layer: dict) -> str:
    layers = [preset_for_method(load_preset(preset), method)] if preset else []
    return provenance.config_hash(build_config(method, [*layers, layer]))


@pytest.mark.parametrize("method, preset, layer, published", PUBLISHED)
def test_a_setting_whose_data_did_not_change_keeps_its_published_hash(method, preset, layer, published):
    """Resuming a comparison, or adding an arm to a published one, finds its cells by this hash."""
    assert hashed(method, preset, layer) == published


def test_a_method_option_added_later_changes_the_hash_only_off_its_default():
    published = hashed("sgpt", "offline-five-sources", {"federation": {"rounds": 30}})
    layer = {"federation": {"rounds": 30}, "sgpt": {"group_mode": "insert"}}
    assert hashed("sgpt", "offline-five-sources", layer) == published == "3d5c1d"
    layer["sgpt"]["group_mode"] = "replace"
    assert hashed("sgpt", "offline-five-sources", layer) != published


@pytest.mark.parametrize(
    "method, preset, layer, published",
    [
        ("fedvpt", "offline-s10", {}, "36b673"),  # pathological class sets drawn at random
        ("fedvpt", "offline-digit5-dif10", {"federation": {"clients": 20}}, "04cd9b"),  # the domains in paper order
        ("fedvpt", None, {"federation": {"participation": 0.05, "unseen_fraction": 0.1}}, "27160a"),  # 4.5: 5, not 4
        ("harmofl", None, {}, "53862a"),  # its amplitude swap moved to pixel space
        ("fedvpt", "offline-digit5-dif10", {"federation": {"unseen_fraction": 0.1}}, "c67bc2"),  # held out by domain
        ("fedvpt", "offline-digit5-dif10", {"data": {"domain_sizes": "geometric"}}, "e681b2"),  # the authors' sizes
        ("fedvpt", None, {"data": {"holdout": "validation"}}, "a6abab"),  # scored on validation rows
        ("fedvpt", None, {"data": {"partition": "pachinko"}}, "bc49f8"),  # Reddi et al.'s draw
        ("pfedhn", None, {}, "6869f3"),  # clients evaluated with h(v_i; phi)
    ],
)
def test_a_setting_whose_data_or_numbers_changed_gets_a_new_hash(method, preset, layer, published):
    """So a resumed comparison never counts a cell computed the old way as one of the new setting's."""
    assert hashed(method, preset, layer) != published
