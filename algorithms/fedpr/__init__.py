"""FedPR (Feng et al., CVPR 2023) on prompts + head: the declaration (description, family, options, capabilities),
read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import in_range, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class PROptions(PromptOptions):
    """FedPR (Feng et al., CVPR 2023): the null space that prompt updates are projected on."""

    ratio: float = setting(
        0.8,
        "Share of the prompt's D directions that updates may use: the null space drops the floor(D (1 - ratio)) "
        "largest and keeps the rest.",
        checks=(in_range(0, 1, open_low=True),),
    )
    normalise: bool = setting(True, "Divide the projector by its Frobenius norm (the authors' code).")


declare(
    "fedpr",
    "raysim.algorithms.fedpr.method:FedPR",
    "FedPR: prompt updates projected on the null space of the global prompt (Feng et al. 2023)",
    family="global",
    options=PROptions,
)
