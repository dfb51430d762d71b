"""A split ViT from random initialisation in the spirit of FESTA (Park et al., 2021), FedV's baseline: the declaration
(description, family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import SPLIT, SPLIT_FP32
from raysim.algorithms.fedv import SplitOptions
from raysim.base.settings import non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class FestaOptions(SplitOptions):
    """FESTA: FedV's split trained from a random encoder, with a larger server step."""

    lr_server: float = setting(
        1e-3, "Learning rate of the server's encoder.", checks=(non_negative("0 freezes the encoder"),)
    )


declare(
    "festa",
    "raysim.algorithms.festa.method:Festa",
    "split ViT from random init, server stepped by the true gradient (FESTA-like FedV baseline)",
    options=FestaOptions,
    fp32_reason=SPLIT_FP32,
    smoke={"festa": {"fedround": 2}},
    **SPLIT,
)
