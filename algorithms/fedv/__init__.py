"""FedV and FedVZ: federated split learning with a pretrained transformer ("Heterogeneous Federated Learning with
Splited Language Model"): the declaration (description, family, options, capabilities), read without torch; the class
is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import SPLIT, SPLIT_FP32
from raysim.base.settings import Settings, at_least, in_range, non_negative, positive, setting
from raysim.core.registry import declare

CLIENT_INITS = ("random", "pretrained")  # fedv.client_init: where the heads and tails start


@dataclass(frozen=True)
class SplitOptions(Settings):
    """Split learning (FedV/FedVZ, "Heterogeneous Federated Learning with Splited Language Model"): where the model is
    cut, how heads and tails start and how often they are averaged, the server's step size."""

    head_blocks: int = setting(
        0,
        "Blocks kept on the client before the server's (0: the head is the patch embedding).",
        checks=(non_negative("blocks kept on the client"),),
    )
    tail_blocks: int = setting(
        0,
        "Blocks kept on the client after the server's (0: the tail is the final norm and the classifier).",
        checks=(non_negative("blocks kept on the client"),),
    )
    fedround: int = setting(
        20,
        "Heads and tails are averaged when (round - 1) % fedround == 0 (Algorithm 1, line 20); between, each client "
        "keeps its own.",
        checks=(at_least(1),),
    )
    lr_server: float = setting(
        1e-6, "Learning rate of the server's encoder.", checks=(non_negative("0 freezes the encoder"),)
    )
    lr_decay: float = setting(
        0.5,
        "Factor lr_server is multiplied by every decay_every rounds.",
        checks=(in_range(0, 1, open_low=True, why="1 keeps lr_server constant"),),
    )
    decay_every: int = setting(100, "Rounds between two lr_decay steps.", checks=(at_least(1),))
    client_init: str = setting(
        "random",
        "Where the clients' heads and tails start: each its own random draw (Algorithm 1, line 1) or the pretrained "
        "weights.",
        choices=CLIENT_INITS,
    )


@dataclass(frozen=True)
class SPSAOptions(SplitOptions):
    """FedVZ: FedV whose server step is an SPSA estimate from two perturbed forwards."""

    eps: float = setting(
        1e-4,
        "The SPSA perturbation scale of the server's zeroth-order estimate.",
        checks=(positive("the SPSA perturbation scale, e.g. 1e-4"),),
    )


declare(
    "fedv",
    "raysim.algorithms.fedv.method:FedV",
    "split learning: client head/tail, server encoder stepped by the true gradient (FedV)",
    options=SplitOptions,
    fp32_reason=SPLIT_FP32,
    smoke={"fedv": {"fedround": 2}},  # the smoke tests' 3 rounds: heads and tails averaged after rounds 1 and 3
    **SPLIT,
)

declare(
    "fedvz",
    "raysim.algorithms.fedv.method:FedVZ",
    "split learning with a zeroth-order server: SPSA from two perturbed forwards (FedVZ)",
    options=SPSAOptions,
    fp32_reason="SPSA's loss differences at +-eps perturbations are below bf16's resolution",
    smoke={"fedvz": {"fedround": 2}},
    **SPLIT,
)
