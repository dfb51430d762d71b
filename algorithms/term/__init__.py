"""TERM (Li, Beirami, Sanjabi, Smith, ICLR 2021) with a client-level tilt, on prompts + head: the declaration
(description, family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class TERMOptions(PromptOptions):
    """TERM (Li, Beirami, Sanjabi, Smith, ICLR 2021) with a client-level tilt."""

    tilt: float = setting(
        0.1,
        "t, the tilt of the server's weights omega_k exp(t F_k): > 0 favours high-loss clients, < 0 down-weighs them, "
        "0 is FedAvg.",
    )


declare(
    "term",
    "raysim.algorithms.term.method:TERM",
    "TERM: client-level tilted aggregation w ~ N_k exp(t F_k), on prompts + head (Li et al. 2021)",
    family="fairness",
    options=TERMOptions,
)
