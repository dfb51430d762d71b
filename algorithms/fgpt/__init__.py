"""FGPT and FGPT-U: group-aware prompt tuning with fixed orthogonal keys (Deng, Thrampoulidis, Li): the declaration
(description, family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import GROUP_METRICS, LAYER_READINGS, PROMPT_TOKENS
from raysim.base.errors import ConfigError
from raysim.base.settings import Settings, at_least, non_negative, setting
from raysim.core.registry import declare

QUERIES = ("plain", "relu")  # fgpt.query


@dataclass(frozen=True)
class FGPTOptions(Settings):
    """FGPT and FGPT-U (Deng, Thrampoulidis, Li, "Heterogeneous Federated Learning with Group-Aware Prompt
    Tuning")."""

    groups: int = setting(10, "G, the number of group prompts and fixed keys.", checks=(at_least(1),))
    shared_length: int = setting(
        5,
        "Tokens of the shared prompt before the first block.",
        checks=(non_negative("0: no shared prompts"), PROMPT_TOKENS),
    )
    group_block: int = setting(
        -1,
        "0-based block the group prompt enters before (-1: the paper's layer 6 of 12 scaled to the backbone).",
        checks=(at_least(-1, "-1: the paper's layer scaled to the backbone"),),
    )
    keys: str = setting(
        "orthogonal",
        "The fixed keys b_g: orthogonal (the paper) or random (its ablation).",
        choices=("orthogonal", "random"),
    )
    query: str = setting(
        "plain",
        "q(x) in Select(x) = argmax_g cos(q(x), b_g): the frozen class token itself (Eq. 5) or after a ReLU (SGPT's "
        "authors' code).",
        choices=QUERIES,
    )
    k: int = setting(5, "FGPT-U's K: the top-K groups whose logits are averaged at inference.", checks=(at_least(1),))
    select_layer: int = setting(
        0, "The block whose class token is the selection query q(x) (0: the last).", checks=(non_negative(),)
    )
    select_layer_as: str = setting(
        "paper",
        "How select_layer L is read: 'paper', the class token after block L (Eq. 2-3); 'code', blocks 0..L then the "
        "final norm (SGPT's authors' code).",
        choices=LAYER_READINGS,
    )


declare(
    "fgpt",
    "raysim.algorithms.fgpt.method:FGPT",
    "shared prompt + one group prompt chosen by fixed orthogonal keys, joint training (Deng et al.)",
    family="group prompts",
    options=FGPTOptions,
    metrics=GROUP_METRICS,
    cohort=True,
)


def top_k_within_groups(config) -> None:
    """FGPT-U averages the logits of the top K of the G groups at inference: K <= G."""
    options = config.options
    if options.k > options.groups:
        raise ConfigError(
            f"fgpt.k={options.k} must be in 1..groups={options.groups} (top-K of the G groups at inference)"
        )


declare(
    "fgpt-u",
    "raysim.algorithms.fgpt.method:FGPTU",
    "FGPT + inference ensembling the top-K groups' logits, prefix blocks computed once (Deng et al.)",
    family="group prompts",
    options=FGPTOptions,
    options_key="fgpt",
    metrics=GROUP_METRICS,
    cohort=True,
    check=top_k_within_groups,
)
