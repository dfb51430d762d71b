"""HarmoFL (Jiang, Wang, Dou, AAAI 2022) on prompts + head: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import in_range, non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class HarmoOptions(PromptOptions):
    """HarmoFL (Jiang, Wang, Dou, AAAI 2022): weight perturbation and amplitude normalisation."""

    alpha: float = setting(
        0.05,
        "alpha, the radius of the weight perturbation at each local step.",
        checks=(non_negative("0: no weight perturbation"),),
    )
    window: float = setting(
        0.5,
        "Half-width, as a share of the image side, of the low-frequency window whose amplitude takes the global mean.",
        checks=(in_range(0, 0.5, why="0: the DC term, 0.5: the whole amplitude"),),
    )


declare(
    "harmofl",
    "raysim.algorithms.harmofl.method:HarmoFL",
    "HarmoFL: inputs take the global mean Fourier amplitude, SAM-like weight perturbation (Jiang et al. 2022)",
    family="domain",
    options=HarmoOptions,
)
