"""FedVPT-D: deep visual prompt tuning (Jia et al., ECCV 2022) with FedAvg: the declaration (description, family,
options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from raysim.algorithms._declarations import PromptOptions
from raysim.core.registry import declare

declare(
    "fedvpt-d",
    "raysim.algorithms.fedvpt_d.method:FedVPTDeep",
    "deep prompt tuning (VPT-deep, prompts at every block) + head with FedAvg",
    family="global",
    options=PromptOptions,
    options_key="fedvpt",
    cohort=True,
    tiers=True,
)
