"""Agnostic FL (Mohri, Sivek, Suresh, ICML 2019) on prompts + head: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import non_negative, setting
from raysim.core.registry import declare

LAMBDA_STEPS = ("ascent", "one-step")  # afl.lambda_step


@dataclass(frozen=True)
class AFLOptions(PromptOptions):
    """Agnostic FL (Mohri et al., ICML 2019): the mixture lambda over clients and how it moves."""

    lambda_lr: float = setting(
        0.1,
        "Step size of the ascent on the client mixture lambda.",
        checks=(non_negative("0 keeps the uniform mixture"),),
    )
    lambda_step: str = setting(
        "ascent",
        "'ascent': the paper's projected ascent on a running lambda; 'one-step': lambda = Proj(omega + lr F) afresh "
        "each round from the data shares omega (FedGCR's code).",
        choices=LAMBDA_STEPS,
    )


declare(
    "afl",
    "raysim.algorithms.afl.method:AFL",
    "Agnostic FL: minimax over a client mixture lambda, projected ascent on the losses (Mohri et al. 2019)",
    family="fairness",
    options=AFLOptions,
)
