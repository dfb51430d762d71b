"""Head-Tune: FedAvg of the linear classifier over a frozen backbone: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from raysim.core.registry import declare

declare(
    "head-tune",
    "raysim.algorithms.head_tune.method:HeadTune",
    "FedAvg of the classifier head only, frozen backbone (linear probe)",
    family="global",
    cohort=True,
    tiers=True,
)
