"""Backbone registry, building, weights files, hub failures (never online), and input preprocessing."""

import re
import socket

import pytest
import torch
from safetensors.torch import save_file

from raysim.base.errors import ConfigError
from raysim.models import backbones
from raysim.models.backbones import BACKBONES, DEFAULT_BACKBONE, build_backbone, input_spec


def one_line_error(call, match):
    with pytest.raises(ConfigError, match=match) as caught:
        call()
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_default_builds_frozen_with_the_right_shapes():
    import timm  # timm only after raysim.models (shim)
    from timm.models.vision_transformer import VisionTransformer

    assert DEFAULT_BACKBONE in BACKBONES and timm.is_model(DEFAULT_BACKBONE)
    vit = build_backbone(DEFAULT_BACKBONE)
    assert isinstance(vit, VisionTransformer)
    assert (vit.embed_dim, len(vit.blocks), vit.patch_embed.patch_size, vit.num_prefix_tokens) == (192, 6, (4, 4), 1)
    assert vit.blocks[0].attn.num_heads == 3 and vit.blocks[0].mlp.fc1.out_features == 4 * 192
    assert vit(torch.zeros(2, 3, 32, 32)).shape == (2, 192)  # headless: the prompt wrapper adds the head
    assert not vit.training and not any(p.requires_grad for p in vit.parameters())
    assert input_spec(vit) == (32, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def test_star_import_survives_timm_registration():
    # timm's register_model appends to the module's __all__; the public API must still be listed.
    assert {"BACKBONES", "DEFAULT_BACKBONE", "build_backbone", "input_spec"} <= set(backbones.__all__)


def test_seed_fixes_the_weights_without_touching_global_rng():
    before = torch.get_rng_state()
    first, same, other = (build_backbone(DEFAULT_BACKBONE, seed=s).state_dict() for s in (1, 1, 2))
    assert torch.equal(before, torch.get_rng_state())
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not torch.equal(first["blocks.0.attn.qkv.weight"], other["blocks.0.attn.qkv.weight"])


def test_seeding_leaves_accelerator_rngs_alone(monkeypatch):
    from raysim.base.prompts import PromptSpec
    from raysim.models.prompted import PromptedViT

    def reseed(seed):
        raise AssertionError("the global CUDA RNG was reseeded")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", reseed)
    PromptedViT(build_backbone(DEFAULT_BACKBONE), PromptSpec(), num_classes=3)


def test_weights_file_round_trip_ignores_head_keys(tmp_path):
    saved = build_backbone(DEFAULT_BACKBONE, seed=1).state_dict()
    path = tmp_path / "backbone.safetensors"
    save_file({**saved, "head.weight": torch.zeros(10, 192), "head.bias": torch.zeros(10)}, str(path))
    loaded = build_backbone(DEFAULT_BACKBONE, weights=path, seed=0).state_dict()
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


def test_missing_weights_file(tmp_path):
    path = tmp_path / "nope.safetensors"
    message = one_line_error(lambda: build_backbone(DEFAULT_BACKBONE, weights=path), "does not exist")
    assert message == (
        f"weights file {path} does not exist; pass a safetensors file saved from backbone {DEFAULT_BACKBONE}"
    )


def test_weights_file_that_is_not_safetensors(tmp_path):
    path = tmp_path / "weights.pt"
    path.write_bytes(b"\x80\x04 this is a pickle, not safetensors")
    one_line_error(lambda: build_backbone(DEFAULT_BACKBONE, weights=path), "is not a readable safetensors file")


def test_weights_file_from_another_architecture(tmp_path):
    from timm.models.vision_transformer import VisionTransformer

    other = VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, num_classes=0)
    path = tmp_path / "other.safetensors"
    save_file(other.state_dict(), str(path))
    message = one_line_error(
        lambda: build_backbone(DEFAULT_BACKBONE, weights=path), f"does not match backbone {DEFAULT_BACKBONE}"
    )
    assert "missing blocks.2." in message
    assert "shape (given vs expected) blocks.0.attn.proj.bias (32,) vs (192,)" in message


def test_weights_file_of_integer_tensors(tmp_path):
    vit = build_backbone(DEFAULT_BACKBONE, pretrained=False)
    state = {key: value.contiguous() for key, value in vit.state_dict().items()}
    state["blocks.0.attn.qkv.weight"] = (state["blocks.0.attn.qkv.weight"] * 100).to(torch.int8)
    path = tmp_path / "quantised.safetensors"
    save_file(state, str(path))
    message = one_line_error(
        lambda: build_backbone(DEFAULT_BACKBONE, weights=path), f"does not match backbone {DEFAULT_BACKBONE}"
    )
    assert "integer tensors where the backbone's are floating point: blocks.0.attn.qkv.weight torch.int8" in message


def test_unknown_name_lists_the_valid_ones():
    message = one_line_error(lambda: build_backbone("vit_nonsense"), "unknown backbone 'vit_nonsense'")
    assert all(name in message for name in BACKBONES)
    assert "any other timm VisionTransformer name works too" in message


def test_timm_model_that_is_not_a_vit():
    one_line_error(lambda: build_backbone("resnet18"), "is a ResNet, not a timm VisionTransformer")
    distilled = "deit_tiny_distilled_patch16_224"
    one_line_error(
        lambda: build_backbone(distilled, pretrained=False),
        re.escape(f"backbone '{distilled}' is a distilled ViT, whose logits average two heads (class and distillation ")
        + re.escape("tokens); raysim trains one head: choose its non-distilled form (e.g. 'deit_tiny_patch16_224')"),
    )


def test_nano_has_no_pretrained_weights():
    one_line_error(
        lambda: build_backbone("raysim_vit_nano_p4_16", pretrained=True),
        "no pretrained weights ship yet .* pass --weights PATH.safetensors or set model.pretrained=false",
    )


def test_hub_failure_is_a_config_error_and_stays_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub

    # huggingface_hub reads the environment at import, so the module constants are set as well.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing to fall back on

    def no_network(*args, **kwargs):
        raise AssertionError("the test tried to reach the network")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    message = one_line_error(
        lambda: build_backbone("vit_tiny_patch16_224", pretrained=True),
        r"could not load pretrained weights for vit_tiny_patch16_224 from the hub \(.+\); "
        r"pass --weights PATH.safetensors or set model.pretrained=false$",
    )
    assert "the test tried to reach the network" not in message


def test_a_hub_that_cannot_be_reached_is_one_line_at_once_with_an_empty_cache(monkeypatch, tmp_path):
    """Without the hub, the pretrained weights come from its local cache alone: one line at once where they are not
    there, not a minute of retries each logged."""
    import huggingface_hub.constants as hub

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: the connection is refused
    monkeypatch.setattr(hub, "ENDPOINT", endpoint)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    try:
        assert not backbones.hub_reachable()
        one_line_error(
            lambda: build_backbone("vit_tiny_patch16_224", pretrained=True),
            rf"could not load pretrained weights for vit_tiny_patch16_224: the hub \({re.escape(endpoint)}\) cannot "
            r"be reached and they are not in its local cache; pass --weights PATH.safetensors",
        )
    finally:
        closed.close()
    assert hub.HF_HUB_OFFLINE is False  # left as it was
    listening = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(hub, "ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
    try:
        assert backbones.hub_reachable()
    finally:
        listening.close()
