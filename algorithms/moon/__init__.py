"""MOON (Li, He, Song, CVPR 2021) on prompts + head: the declaration (description, family, options, capabilities),
read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import non_negative, positive, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class MOONOptions(PromptOptions):
    """MOON (Li, He, Song, CVPR 2021): the model-contrastive term."""

    mu: float = setting(
        1.0, "mu, the weight of the model-contrastive loss l_con.", checks=(non_negative("0 is FedVPT"),)
    )
    tau: float = setting(0.5, "tau, the temperature of l_con's cosine similarities.", checks=(positive(),))


declare(
    "moon",
    "raysim.algorithms.moon.method:MOON",
    "MOON: model-contrastive term between local, global and previous-local representations (Li et al. 2021)",
    family="global",
    options=MOONOptions,
)
