"""Ditto (Li, Hu, Beirami, Smith, ICML 2021), full fine-tuning with personal models: the declaration (description,
family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.base.settings import Settings, non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class DittoOptions(Settings):
    """Ditto (Li et al., ICML 2021): the pull of the personal models to the global one."""

    lam: float = setting(
        0.75,
        "lambda of the proximal term (lambda/2)||v - w||^2 pulling each personal model v to the global model w.",
        checks=(non_negative("0 trains the personal models alone"),),
    )


declare(
    "ditto",
    "raysim.algorithms.ditto.method:Ditto",
    "Ditto: FedAvg global model + personal models pulled to it by (lambda/2)||v - w||^2 (Li et al. 2021)",
    family="personalised",
    options=DittoOptions,
)
