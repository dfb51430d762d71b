"""FedVPT ("PT-FedAvg" in SGPT/FGPT): visual prompt tuning (Jia et al., ECCV 2022) with FedAvg.

VPT-shallow: ``prompt_length`` learnable tokens enter after CLS before the first block; prompts and the
head train and are averaged with N_i / N. The backbone stays frozen.
"""

from dataclasses import dataclass

from raysim.algorithms.fedavg import FedAvg
from raysim.core.errors import ConfigError
from raysim.core.prompts import POOLINGS, PromptSlot, PromptSpec
from raysim.core.protocol import ModelParts
from raysim.core.registry import register


@dataclass(frozen=True)
class PromptOptions:
    """Prompt length and head pooling, shared by the prompt-tuning baselines."""

    prompt_length: int = 10
    head_pooling: str = "backbone"

    def __post_init__(self):
        if self.prompt_length < 1:
            raise ConfigError(f"prompt_length={self.prompt_length} must be at least 1")
        if self.head_pooling not in POOLINGS:
            raise ConfigError(f"head_pooling={self.head_pooling!r} is not one of {', '.join(POOLINGS)}")


@register(
    "fedvpt",
    "prompt tuning (VPT-shallow) + head with FedAvg, a.k.a. PT-FedAvg",
    family="global",
    options=PromptOptions,
    cohort=True,
    tiers=True,
)
class FedVPT(FedAvg):
    def parts(self, vit, generator) -> ModelParts:
        slot = PromptSlot("shallow", blocks=(0,), length=self.options.prompt_length, mode="insert")
        return ModelParts(PromptSpec(slots=(slot,), head_pooling=self.options.head_pooling))
