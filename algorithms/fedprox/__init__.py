"""FedProx (Li et al., MLSys 2020) on prompts + head: the declaration (description, family, options, capabilities),
read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class ProxOptions(PromptOptions):
    """FedProx (Li et al., MLSys 2020): the proximal term's weight."""

    mu: float = setting(
        0.01,
        "mu of the proximal term (mu/2)||w - w_global||^2 over the trained tensors.",
        checks=(non_negative("0 is plain FedAvg"),),
    )


declare(
    "fedprox",
    "raysim.algorithms.fedprox.method:FedProx",
    "FedProx on prompts + head: local loss + (mu/2)||w - w_global||^2 (Li et al. 2020)",
    family="global",
    options=ProxOptions,
    cohort=True,
    tiers=True,
)
