"""The recipe of ``raysim pretrain`` (kept free of torch so the CLI can show its defaults cheaply)."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.errors import ConfigError


@dataclass(frozen=True)
class PretrainRecipe:
    """Supervised pretraining hyperparameters (AdamW, warm-up + cosine, label smoothing)."""

    backbone: str = "raysim_vit_tiny_p4_32"
    per_class: int = 100
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.1
    seed: int = 0
    threads: int = 2

    def __post_init__(self):
        if self.per_class < 2 or self.epochs < 1 or self.batch_size < 1 or self.threads < 1:
            raise ConfigError("pretrain: per_class >= 2, epochs >= 1, batch_size >= 1 and threads >= 1 are required")
