"""The pretraining recipe at tiny scale, and the shipped weights' hash check."""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from raysim.base.errors import ConfigError
from raysim.cli import main
from raysim.engine.pretrain import PretrainRecipe, pretrain, sha256_of
from raysim.models import backbones
from raysim.models.backbones import DEFAULT_BACKBONE, NANO_BACKBONE, build_backbone

TINY = PretrainRecipe(backbone=NANO_BACKBONE, per_class=3, epochs=1, batch_size=64, threads=1)


def test_tiny_recipe_is_deterministic_and_its_file_loads(tmp_path):
    first = pretrain(TINY, tmp_path / "a.safetensors", command="raysim pretrain --out a.safetensors")
    second = pretrain(TINY, tmp_path / "b.safetensors")
    assert first["sha256"] == second["sha256"] == sha256_of(tmp_path / "a.safetensors")
    sidecar = json.loads((tmp_path / "a.json").read_text())
    assert sidecar["command"] == "raysim pretrain --out a.safetensors" and sidecar["corpus"]["classes"] > 100
    trained = build_backbone(NANO_BACKBONE, weights=tmp_path / "a.safetensors")
    random = build_backbone(NANO_BACKBONE, seed=0)
    assert not torch.equal(trained.blocks[0].attn.qkv.weight, random.blocks[0].attn.qkv.weight)


def test_shipped_weights_load_by_hash_and_differ_from_random_init():
    sidecar = backbones.shipped_weights(DEFAULT_BACKBONE)
    assert sidecar is not None and sidecar["command"].startswith("raysim pretrain")
    out = main.commands["pretrain"].make_context("pretrain", shlex.split(sidecar["command"])[2:]).params["out"]
    assert (Path(__file__).parents[2] / out).resolve() == (backbones.WEIGHTS_DIR / sidecar["file"]).resolve()
    assert (backbones.WEIGHTS_DIR / sidecar["file"]).stat().st_size < 10 * 2**20
    pretrained = build_backbone(DEFAULT_BACKBONE, pretrained=True)
    random = build_backbone(DEFAULT_BACKBONE, pretrained=False, seed=0)
    assert not torch.equal(pretrained.patch_embed.proj.weight, random.patch_embed.proj.weight)


def test_tampered_shipped_weights_fail_the_hash_check(tmp_path, monkeypatch):
    sidecar = backbones.shipped_weights(DEFAULT_BACKBONE)
    shutil.copy(backbones.WEIGHTS_DIR / f"{DEFAULT_BACKBONE}.json", tmp_path)
    data = bytearray((backbones.WEIGHTS_DIR / sidecar["file"]).read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / sidecar["file"]).write_bytes(bytes(data))
    monkeypatch.setattr(backbones, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ConfigError, match="fail their SHA-256 check"):
        build_backbone(DEFAULT_BACKBONE, pretrained=True)


def test_recorded_command_sets_every_recipe_field():
    recipe = PretrainRecipe(
        per_class=7,
        epochs=3,
        batch_size=32,
        lr=2.5e-3,
        weight_decay=0.1,
        warmup_epochs=0.5,
        label_smoothing=0.0,
        seed=4,
        threads=1,
        precision="fp32",
    )
    argv = shlex.split(recipe.command("my weights/w.safetensors"))
    assert argv[:2] == ["raysim", "pretrain"]
    params = main.commands["pretrain"].make_context("pretrain", argv[2:]).params
    assert params.pop("out") == "my weights/w.safetensors" and params == asdict(recipe)


def test_an_out_file_that_is_not_safetensors_is_refused_before_any_work(tmp_path):
    """The sidecar is OUT with .json in place of its suffix: ``--out w.json`` would write it over the weights."""
    result = CliRunner().invoke(main, ["pretrain", "--out", str(tmp_path / "w.json")])
    assert result.exit_code == 2 and not any(tmp_path.iterdir())
    said = f"--out {tmp_path / 'w.json'} must end in .safetensors (the .json sidecar is written beside it)"
    assert result.stderr.strip() == f"raysim: error: {said}"


def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "w.safetensors"
    result = CliRunner().invoke(main, ["pretrain", "--out", str(out)])
    assert result.exit_code == 2 and [p.name for p in tmp_path.iterdir()] == ["a-file"]
    said = f"--out {out} cannot be written (no files can be created in {tmp_path / 'a-file'}); pass another --out"
    assert result.stderr.strip() == f"raysim: error: {said}"


def test_an_unknown_backbone_is_refused_before_the_corpus_is_rendered(tmp_path, monkeypatch):
    from raysim.engine import pretrain

    monkeypatch.setattr(pretrain, "pretrain_corpus", lambda *args: pytest.fail("rendered before the name was checked"))
    result = CliRunner().invoke(main, ["pretrain", "--out", str(tmp_path / "w.safetensors"), "--backbone", "nosuch"])
    assert result.exit_code == 2 and not any(tmp_path.iterdir())
    assert result.stderr.strip().startswith("raysim: error: unknown backbone 'nosuch'; valid backbones: ")


def test_unknown_precision_is_refused():
    with pytest.raises(ConfigError, match="unknown precision 'fp16'; use one of fp32, bf16"):
        PretrainRecipe(precision="fp16")


@pytest.mark.parametrize(
    "field, value, requirement",
    [
        ("lr", -1.0, "--lr=-1.0 must be a finite number > 0"),
        ("lr", float("nan"), "--lr=nan must be a finite number > 0"),
        ("weight_decay", float("inf"), "--weight-decay=inf must be a finite number >= 0"),
        ("warmup_epochs", -5.0, "--warmup-epochs=-5.0 must be a finite number >= 0"),
        ("label_smoothing", 1.0, "--label-smoothing=1.0 must be in [0, 1)"),
        ("seed", -1, "--seed=-1 must be >= 0"),
        ("per_class", 1, "--per-class=1 must be at least 2"),
        ("threads", 100000, "--threads=100000 must be in [1, 1024]"),
    ],
)
def test_a_bad_recipe_value_is_refused_naming_it(field, value, requirement):
    with pytest.raises(ConfigError) as info:
        PretrainRecipe(**{field: value})
    assert str(info.value) == f"pretrain: {requirement}"


def test_a_corpus_beyond_the_available_memory_is_refused_before_it_is_rendered(tmp_path):
    with pytest.raises(ConfigError) as info:
        pretrain(PretrainRecipe(per_class=10**12), tmp_path / "w.safetensors")
    assert "--per-class=1000000000000 renders" in str(info.value) and "lower --per-class" in str(info.value)
    assert list(tmp_path.iterdir()) == []
