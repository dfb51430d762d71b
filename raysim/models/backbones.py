"""Frozen ViT backbones from timm: the registry of names, building, and loading local safetensors weights.

Every backbone is built headless (``num_classes=0``): the prompt wrapper adds the classifier for the task,
so hub checkpoints drop their classifier and ``head.*`` keys in a weights file are ignored.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import timm
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from timm.models import build_model_with_cfg, generate_default_cfgs, get_pretrained_cfg, register_model
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer

from raysim.base.errors import ConfigError, unknown_name
from raysim.base.named import Registry
from raysim.base.shipped_weights import WEIGHTS_DIR, shipped_weights

# timm's register_model appends each registered name to __all__ (creating it if absent), so declare it.
__all__ = [
    "BACKBONES",
    "DEFAULT_BACKBONE",
    "NANO_BACKBONE",
    "WEIGHTS_DIR",
    "build_backbone",
    "input_spec",
    "refuse_unknown_backbone",
    "shipped_weights",
    "state_mismatches",
    "verified_shipped_weights",
]

DEFAULT_BACKBONE = "raysim_vit_tiny_p4_32"
NANO_BACKBONE = "raysim_vit_nano_p4_16"

BACKBONES: Registry[str] = Registry("backbone")  # name -> one line; any other timm ViT name builds too
for _name, _description in {
    DEFAULT_BACKBONE: "ViT-Tiny, patch 4, 32x32 input, depth 6 (raysim default; builds offline)",
    NANO_BACKBONE: "ViT-Nano, width 64, patch 4, 16x16 input, depth 4 (seconds-long smoke runs and tests)",
    "vit_base_patch16_224.augreg_in21k": "ViT-B/16 pretrained on ImageNet-21k (SGPT, FGPT, FedGCR)",
    "deit_small_patch16_224": "DeiT-S/16 pretrained on ImageNet-1k (FedV, FedVZ)",
    "vit_tiny_patch16_224": "ViT-Ti/16 pretrained on ImageNet-21k, fine-tuned on ImageNet-1k",
}.items():
    BACKBONES.add(_name, _description)

_HALF = (0.5, 0.5, 0.5)
_SHOWN_KEYS = 3  # how many offending keys a mismatch error names per kind


def _offline_cfg(size: int) -> dict:
    return {
        "num_classes": 0,
        "input_size": (3, size, size),
        "fixed_input_size": True,
        "interpolation": "bilinear",
        "crop_pct": 1.0,
        "mean": _HALF,
        "std": _HALF,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        "license": "apache-2.0",
    }


# register_model reads the pretrained configs from this module-level name.
default_cfgs = generate_default_cfgs({DEFAULT_BACKBONE: _offline_cfg(32), NANO_BACKBONE: _offline_cfg(16)})


@register_model
def raysim_vit_tiny_p4_32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """The small offline default: ViT-Tiny width (192) with patch 4 on 32x32 images and 6 blocks."""
    model_args = dict(img_size=32, patch_size=4, in_chans=3, embed_dim=192, depth=6, num_heads=3, mlp_ratio=4)
    return build_model_with_cfg(VisionTransformer, DEFAULT_BACKBONE, pretrained, **dict(model_args, **kwargs))


@register_model
def raysim_vit_nano_p4_16(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """A tiny ViT for smoke runs and tests: width 64, patch 4 on 16x16 images, 4 blocks."""
    model_args = dict(img_size=16, patch_size=4, in_chans=3, embed_dim=64, depth=4, num_heads=2, mlp_ratio=4)
    return build_model_with_cfg(VisionTransformer, NANO_BACKBONE, pretrained, **dict(model_args, **kwargs))


def refuse_unknown_backbone(name: str) -> None:
    """One line, listing raysim's backbones, for a name neither raysim nor timm knows."""
    if name not in BACKBONES and not timm.is_model(name):
        message = unknown_name("backbone", name, BACKBONES)
        raise ConfigError(f"{message}; any other timm VisionTransformer name works too")


def build_backbone(
    name: str, *, weights: str | Path | None = None, pretrained: bool = False, seed: int = 0
) -> VisionTransformer:
    """Build a frozen, headless timm VisionTransformer.

    Args:
        name: A key of ``BACKBONES`` or any other timm model name that builds a VisionTransformer.
        weights: A local safetensors file with this backbone's state dict (``head.*`` keys are ignored).
            Takes precedence over ``pretrained``.
        pretrained: Load timm's pretrained weights from the Hugging Face hub.
        seed: Seed of the random initialisation; the global RNG is left untouched.

    Returns:
        The model in eval mode with every parameter frozen.

    Raises:
        ConfigError: Unknown or non-ViT name, unusable weights file, or pretrained weights unavailable.
    """
    refuse_unknown_backbone(name)
    path = None if weights is None else Path(weights)
    if path is None and pretrained:
        path = verified_shipped_weights(name)
    state = None if path is None else _read_weights(path, name)
    load_hub = pretrained and state is None
    if load_hub:
        _require_pretrained_source(name)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)  # CPU only: torch.manual_seed would also reseed CUDA for good
        vit = _create(name, load_hub)
    if not isinstance(vit, VisionTransformer):
        raise ConfigError(
            f"backbone {name!r} is a {type(vit).__name__}, not a timm VisionTransformer; "
            f"choose a ViT such as {DEFAULT_BACKBONE!r}"
        )
    if isinstance(vit, VisionTransformerDistilled):  # its second head would stay a random, frozen half of each logit
        raise ConfigError(
            f"backbone {name!r} is a distilled ViT, whose logits average two heads (class and distillation tokens); "
            f"raysim trains one head: choose its non-distilled form (e.g. {name.replace('_distilled', '')!r})"
        )
    if state is not None:
        _load_state(vit, name, path, state)
    return vit.eval().requires_grad_(False)


def verified_shipped_weights(name: str) -> Path | None:
    """Path of the shipped weights of ``name`` after checking their SHA-256 against the sidecar; None if
    none ship."""
    sidecar = shipped_weights(name)
    if sidecar is None:
        return None
    path = WEIGHTS_DIR / sidecar["file"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if digest != sidecar["sha256"]:
        raise ConfigError(
            f"shipped weights {path} fail their SHA-256 check ({digest[:12]} != "
            f"{sidecar['sha256'][:12]}); reinstall raysim or regenerate them with: {sidecar['command']}"
        )
    return path


def input_spec(vit: VisionTransformer) -> tuple[int, tuple[float, float, float], tuple[float, float, float]]:
    """Image side length and normalisation (mean, std) the backbone expects.

    The size comes from ``patch_embed.img_size``; mean and std from ``pretrained_cfg`` (0.5 if absent).
    """
    height, width = vit.patch_embed.img_size
    if height != width:
        raise ConfigError(f"backbone input {height}x{width} is not square; choose a backbone with square input")
    cfg = getattr(vit, "pretrained_cfg", None) or {}
    return height, tuple(cfg.get("mean", _HALF)), tuple(cfg.get("std", _HALF))


def state_mismatches(expected: dict[str, torch.Size], state: dict[str, torch.Tensor]) -> str:
    """One-line description of missing, unexpected and wrongly shaped keys (a few of each); empty if none.

    Args:
        expected: Key -> shape the model has.
        state: Key -> tensor given for loading.
    """
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    shapes = [
        f"{key} {tuple(state[key].shape)} vs {tuple(shape)}"
        for key, shape in sorted(expected.items())
        if key in state and state[key].shape != shape
    ]
    parts = [
        f"{label} {', '.join(keys[:_SHOWN_KEYS])}{' ...' if len(keys) > _SHOWN_KEYS else ''}"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape (given vs expected)", shapes))
        if keys
    ]
    return "; ".join(parts)


def _require_pretrained_source(name: str) -> None:
    """Fail early when the timm config of ``name`` names no file, URL or hub id to load from."""
    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # an invalid pretrained tag: timm.create_model reports it
        return
    if cfg is not None and not (cfg.file or cfg.url or cfg.hf_hub_id or cfg.state_dict):
        raise ConfigError(
            f"no pretrained weights ship yet for backbone {name!r}; "
            "pass --weights PATH.safetensors or set model.pretrained=false"
        )


def _create(name: str, pretrained: bool) -> torch.nn.Module:
    """``timm.create_model`` without a classifier, turning its failures into ConfigError. Pretrained weights come
    from the hub, or from its local cache alone where the hub cannot be reached (:func:`hub_reachable`): not after a
    minute of retries, each logged."""
    from huggingface_hub import constants

    was = constants.HF_HUB_OFFLINE
    offline = pretrained and not was and not hub_reachable()
    try:
        constants.HF_HUB_OFFLINE = was or offline
        return timm.create_model(name, pretrained=pretrained, num_classes=0)
    except Exception as error:  # timm and huggingface_hub raise many unrelated types
        reason = _short(error)
        if offline:
            raise ConfigError(
                f"could not load pretrained weights for {name}: the hub ({constants.ENDPOINT}) cannot be reached "
                "and they are not in its local cache; pass --weights PATH.safetensors or set model.pretrained=false"
            ) from error
        if pretrained:
            raise ConfigError(
                f"could not load pretrained weights for {name} from the hub ({reason}); "
                "pass --weights PATH.safetensors or set model.pretrained=false"
            ) from error
        raise ConfigError(f"could not build backbone {name!r} ({reason}); check the name") from error
    finally:
        constants.HF_HUB_OFFLINE = was


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the Hugging Face hub's endpoint (``HF_ENDPOINT``) opens within ``timeout_s``."""
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _read_weights(path: Path, name: str) -> dict[str, torch.Tensor]:
    """The non-head tensors of a safetensors file (never pickle)."""
    if not path.exists():
        raise ConfigError(f"weights file {path} does not exist; pass a safetensors file saved from backbone {name}")
    try:
        state = load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise ConfigError(
            f"weights file {path} is not a readable safetensors file ({_short(error)}); "
            f"pass a safetensors file saved from backbone {name}"
        ) from error
    return {key: value for key, value in state.items() if not key.startswith("head.")}


def _load_state(vit: VisionTransformer, name: str, path: Path, state: dict[str, torch.Tensor]) -> None:
    """Strictly load ``state`` (read from ``path``) into the headless ``vit``: the same keys and shapes, and floating
    point wherever the backbone is (a quantised file's integers would be cast into weights silently)."""
    own = vit.state_dict()
    problems = state_mismatches({key: value.shape for key, value in own.items()}, state)
    if not problems:
        integral = [
            f"{key} {value.dtype}"
            for key, value in state.items()
            if own[key].is_floating_point() and not value.is_floating_point()
        ]
        if integral:
            problems = f"integer tensors where the backbone's are floating point: {', '.join(integral[:_SHOWN_KEYS])}"
    if problems:
        raise ConfigError(
            f"weights file {path} does not match backbone {name}: {problems}; "
            f"pass a safetensors file saved from backbone {name}"
        )
    vit.load_state_dict(state, strict=True)


def _short(error: Exception, limit: int = 120) -> str:
    """First line of an exception, clipped, for one-line messages."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first[:limit].strip()}"
