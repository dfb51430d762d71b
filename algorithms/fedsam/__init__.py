"""FedSAM (Qu et al., ICML 2022) on prompts + head: the declaration (description, family, options, capabilities), read
without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class SAMOptions(PromptOptions):
    """FedSAM (Qu et al., ICML 2022): the sharpness-aware step's radius."""

    rho: float = setting(0.05, "rho, the radius of SAM's ascent step.", checks=(non_negative("0 is FedVPT"),))


declare(
    "fedsam",
    "raysim.algorithms.fedsam.method:FedSAM",
    "FedSAM: sharpness-aware local steps (radius rho) on prompts + head, FedAvg aggregation (Qu et al. 2022)",
    family="global",
    options=SAMOptions,
)
