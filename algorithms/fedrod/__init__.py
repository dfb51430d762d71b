"""Fed-RoD (Chen and Chao, ICLR 2022), a generic model and personal linear heads: the declaration (description,
family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from raysim.core.registry import declare

declare(
    "fedrod",
    "raysim.algorithms.fedrod.method:FedRoD",
    "Fed-RoD: generic model on the balanced softmax loss + a personal linear head (Chen & Chao 2022)",
    family="personalised",
)
