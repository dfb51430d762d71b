"""FedAvg (McMahan et al., AISTATS 2017), full fine-tuning: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from raysim.core.registry import declare

declare(
    "fedavg",
    "raysim.algorithms.fedavg.method:FedAvg",
    "FedAvg, full fine-tuning of backbone + head (McMahan et al. 2017)",
    family="global",
)
