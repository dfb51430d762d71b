"""Agnostic FL (Mohri, Sivek, Suresh, ICML 2019) on prompts + head: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import setting
from raysim.core.registry import declare

LAMBDA_STEPS = ("ascent", "one-step")  # afl.lambda_step


@dataclass(frozen=True)
class AFLOptions(PromptOptions):
    """Agnostic FL (Mohri et al., ICML 2019): the mixture lambda over clients and how it moves."""

    lambda_lr: float = setting(
        -1.0,
        "Step size of the ascent on the client mixture lambda (0 keeps the uniform mixture; -1: m / (2 M^2) for M "
        "clients, m a round, or 1 / (2 m) with lambda_step=one-step, so that a client's weight gains half its "
        "uniform share per unit of loss in a round; the paper gives no value).",
        checks=((lambda v: v >= 0 or v == -1, "must be >= 0 (0 keeps the uniform mixture; -1: m / (2 M^2))"),),
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
