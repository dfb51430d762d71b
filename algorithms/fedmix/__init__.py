"""FedMix (Yoon et al., ICLR 2021) on prompts + head: the declaration (description, family, options, capabilities),
read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import in_range, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class FedMixOptions(PromptOptions):
    """FedMix (Yoon et al., ICLR 2021): the mixup weight."""

    lam: float = setting(
        0.05,
        "lambda, the weight of the shared means in the approximated mixup loss.",
        checks=(in_range(0, 1, open_high=True, why="0 is FedVPT"),),
    )


declare(
    "fedmix",
    "raysim.algorithms.fedmix.method:FedMix",
    "FedMix: clients share data means once; local loss approximates mixup with the global means (Yoon et al. 2021)",
    family="global",
    options=FedMixOptions,
    bf16=False,
    fp32_reason="the Taylor term differentiates an input gradient (double backward through the frozen ViT)",
)
