"""The recipe of ``raysim pretrain`` (kept free of torch so the CLI can show its defaults cheaply)."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, fields

from raysim.base.errors import ConfigError
from raysim.base.settings import MAX_THREADS

PRECISIONS = ("fp32", "bf16")  # the recipe's forward pass: bf16 autocast (the shipped file's) or float32


def _opt(default, help: str, choices: tuple[str, ...] | None = None):
    """A recipe field with its CLI help (and its valid values, when it has a fixed set)."""
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass(frozen=True)
class PretrainRecipe:
    """Supervised pretraining hyperparameters (AdamW, warm-up + cosine, label smoothing).

    Every field is a ``raysim pretrain`` option, and :meth:`command` spells all of them out, so the command
    recorded beside a weights file reproduces it even after the defaults change.
    """

    backbone: str = _opt("raysim_vit_tiny_p4_32", "timm name of the backbone.")
    per_class: int = _opt(200, "Rendered images per pretraining class.")
    epochs: int = _opt(10, "Passes over the corpus.")
    batch_size: int = _opt(128, "Images per optimizer step.")
    lr: float = _opt(1e-3, "AdamW peak learning rate (linear warm-up, then cosine to 0).")
    weight_decay: float = _opt(0.05, "AdamW weight decay.")
    warmup_epochs: float = _opt(1.0, "Epochs of linear learning-rate warm-up.")
    label_smoothing: float = _opt(0.1, "Cross-entropy label smoothing.")
    seed: int = _opt(0, "Seed of the corpus, the initialisation and the batch order.")
    threads: int = _opt(2, "torch threads (fix it to reproduce the file).")
    precision: str = _opt(
        "bf16",
        "bf16: forward under CPU autocast (about twice as fast with AVX-512 BF16; "
        "weights and optimizer stay float32), or fp32.",
        PRECISIONS,
    )

    def __post_init__(self):
        for name, holds, requirement in (
            ("per_class", self.per_class >= 2, "must be at least 2"),
            ("epochs", self.epochs >= 1, "must be at least 1"),
            ("batch_size", self.batch_size >= 1, "must be at least 1"),
            ("threads", 1 <= self.threads <= MAX_THREADS, f"must be in [1, {MAX_THREADS}]"),
            ("seed", self.seed >= 0, "must be >= 0"),
            ("lr", math.isfinite(self.lr) and self.lr > 0, "must be a finite number > 0"),
            (
                "weight_decay",
                math.isfinite(self.weight_decay) and self.weight_decay >= 0,
                "must be a finite number >= 0",
            ),
            (
                "warmup_epochs",
                math.isfinite(self.warmup_epochs) and self.warmup_epochs >= 0,
                "must be a finite number >= 0",
            ),
            ("label_smoothing", 0 <= self.label_smoothing < 1, "must be in [0, 1)"),
        ):
            if not holds:
                raise ConfigError(f"pretrain: --{name.replace('_', '-')}={getattr(self, name)} {requirement}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"pretrain: unknown precision {self.precision!r}; use one of {', '.join(PRECISIONS)}")

    def command(self, out: str) -> str:
        """The ``raysim pretrain`` command line that runs this recipe, every option explicit."""
        options = [part for f in fields(self) for part in (f"--{f.name.replace('_', '-')}", str(getattr(self, f.name)))]
        return shlex.join(["raysim", "pretrain", "--out", str(out), *options])
