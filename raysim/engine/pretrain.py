"""``raysim pretrain``: the reproducible recipe behind the offline default backbone's shipped weights.

The papers prompt-tune backbones pretrained with full supervision on public data (ImageNet-21k). raysim's
offline default mirrors that at laptop scale: the small ViT is trained with full supervision on glyphs of
scripts that no benchmark uses (Greek, Cyrillic, ...; :func:`raysim.data.glyphs.pretrain_corpus`, which
excludes every homoglyph of the benchmark characters), then its classifier is dropped and the backbone is
saved as float16 safetensors with a JSON sidecar (SHA-256, recipe, command, timings, held-out accuracy).
Every draw comes from the recipe's seed; on one machine with the same thread count the file is identical.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import psutil
import torch
from safetensors.torch import save_file

from raysim.base.errors import ConfigError
from raysim.base.memory import reuse_freed_memory
from raysim.base.paths import unwritable
from raysim.base.precision import autocast
from raysim.base.preprocess import to_model_input
from raysim.config.pretrain_recipe import PretrainRecipe
from raysim.data.glyphs import SIZE, pretrain_chars, pretrain_corpus, renderer
from raysim.models.backbones import build_backbone, input_spec, refuse_unknown_backbone

HELD_OUT = 0.05


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _split(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A held-out mask: HELD_OUT of every class."""
    held = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        held[rng.permutation(rows)[: max(1, round(HELD_OUT * len(rows)))]] = True
    return held


def _lr_at(step: int, total: int, warmup: int, base: float) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return 0.5 * base * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


@torch.no_grad()
def _accuracy(model, images: np.ndarray, labels: np.ndarray, size, mean, std) -> float:

    model.eval()
    hits = 0
    for s in range(0, len(labels), 512):
        x = to_model_input(torch.tensor(images[s : s + 512]), size, mean, std)
        hits += int((model(x).argmax(1) == torch.tensor(labels[s : s + 512])).sum())
    return 100.0 * hits / max(1, len(labels))


def refuse_corpus_beyond_memory(per_class: int) -> None:
    """Refuse (one line) a corpus that would not fit in the memory available now: its images are rendered in memory
    and the training split copied, so a process asked for more would be killed for it, with other work beside it."""
    images = per_class * len(pretrain_chars())
    need, available = 2 * images * SIZE * SIZE * 3, psutil.virtual_memory().available
    if need > available:
        raise ConfigError(
            f"pretrain: --per-class={per_class} renders {images:,} images, about {need / 2**30:,.1f} GiB with the "
            f"training split's copy, and {available / 2**30:.1f} GiB of memory is available; lower --per-class"
        )


def pretrain(
    recipe: PretrainRecipe, out: str | Path, command: str = "", report: Callable[[int, int, float], None] | None = None
) -> dict:
    """Train the backbone on the pretraining corpus and write ``out`` (safetensors) and ``out.json``.

    Args:
        report: called as (epoch, epochs, mean loss) after every epoch (progress display).

    Returns:
        The sidecar dict (also written next to ``out``).
    """

    out = Path(out)
    if not out.parent.exists():
        raise ConfigError(f"output folder {out.parent} does not exist; create it or pass another --out")
    blocked = unwritable(out.parent)  # before the training, not after it
    if blocked is not None:
        raise ConfigError(f"--out {out} cannot be written (no files can be created in {blocked}); pass another --out")
    refuse_unknown_backbone(recipe.backbone)  # before the corpus is rendered, not after
    refuse_corpus_beyond_memory(recipe.per_class)
    torch.set_num_threads(recipe.threads)
    reuse_freed_memory()
    start = time.perf_counter()
    images, labels, chars = pretrain_corpus(recipe.per_class, recipe.seed)
    corpus_s = time.perf_counter() - start
    held = _split(labels, np.random.default_rng([recipe.seed, 1]))
    train_x, train_y = images[~held], labels[~held]
    vit = build_backbone(recipe.backbone, seed=recipe.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        vit.reset_classifier(len(chars))
    vit.requires_grad_(True)
    size, mean, std = input_spec(vit)
    optimizer = torch.optim.AdamW(vit.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    steps_per_epoch = math.ceil(len(train_y) / recipe.batch_size)
    total, warmup = recipe.epochs * steps_per_epoch, int(recipe.warmup_epochs * steps_per_epoch)
    generator = torch.Generator().manual_seed(recipe.seed)
    step = 0
    for epoch in range(1, recipe.epochs + 1):
        vit.train()
        losses = []
        for idx in torch.randperm(len(train_y), generator=generator).split(recipe.batch_size):
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(step, total, warmup, recipe.lr)
            x = to_model_input(torch.tensor(train_x[idx.numpy()]), size, mean, std)
            with autocast(torch.device("cpu"), recipe.precision):
                logits = vit(x)
            loss = torch.nn.functional.cross_entropy(
                logits.float(), torch.tensor(train_y[idx.numpy()]), label_smoothing=recipe.label_smoothing
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
        if report:
            report(epoch, recipe.epochs, float(np.mean(losses)))
    held_acc = _accuracy(vit, images[held], labels[held], size, mean, std)
    pillow, freetype = renderer()  # the corpus images, hence the file, depend on the glyph renderer
    vit.reset_classifier(0)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in vit.state_dict().items()}
    # One metadata key: safetensors writes several in hash-map order, which would change the file's bytes.
    save_file(state, str(out), metadata={"raysim_recipe": json.dumps(asdict(recipe), sort_keys=True)})
    sidecar = {
        "backbone": recipe.backbone,
        "file": out.name,
        "sha256": sha256_of(out),
        "bytes": out.stat().st_size,
        "recipe": asdict(recipe),
        "command": command,
        "corpus": {
            "classes": len(chars),
            "images": len(labels),
            "held_out": int(held.sum()),
            "characters": "".join(chars),
        },
        "held_out_accuracy": held_acc,
        "seconds": {"corpus": round(corpus_s, 1), "total": round(time.perf_counter() - start, 1)},
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": recipe.threads,
            "processor": platform.machine(),
            "pillow": pillow,
            "freetype": freetype,
        },
    }
    out.with_suffix(".json").write_text(json.dumps(sidecar, indent=2, ensure_ascii=False) + "\n")
    return sidecar


@torch.no_grad()
def backbone_features(vit, images: np.ndarray, batch: int = 512) -> np.ndarray:
    """Frozen pre-logits features (timm's pooling + fc_norm) for uint8 images."""

    size, mean, std = input_spec(vit)
    vit.eval()
    out = [
        vit.forward_head(
            vit.forward_features(to_model_input(torch.tensor(images[s : s + batch]), size, mean, std)), pre_logits=True
        ).numpy()
        for s in range(0, len(images), batch)
    ]
    return np.concatenate(out)


def linear_probe(vit, arrays: dict[str, np.ndarray]) -> float:
    """Test accuracy (%) of a logistic-regression head on frozen features (train rows -> test rows)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    features = backbone_features(vit, arrays["image"])
    test = arrays["is_test"].astype(bool)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    probe.fit(features[~test], arrays["label"][~test])
    return 100.0 * probe.score(features[test], arrays["label"][test])
