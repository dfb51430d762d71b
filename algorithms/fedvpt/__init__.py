"""FedVPT: visual prompt tuning (Jia et al., ECCV 2022) with FedAvg: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from raysim.algorithms._declarations import PromptOptions
from raysim.core.registry import declare

declare(
    "fedvpt",
    "raysim.algorithms.fedvpt.method:FedVPT",
    "prompt tuning (VPT-shallow) + head with FedAvg, a.k.a. PT-FedAvg",
    family="global",
    options=PromptOptions,
    cohort=True,
    tiers=True,
)
