"""Fed-DualPrompt: DualPrompt (Wang et al., ECCV 2022) with FedAvg, FGPT's baseline: the declaration (description,
family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import BLOCKS, PROMPT_TOKENS
from raysim.base.settings import Settings, at_least, non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class DualPromptOptions(Settings):
    """Fed-DualPrompt (DualPrompt, Wang et al., ECCV 2022, with FedAvg); empty block lists mean DualPrompt's blocks
    (G: 0-1, E: 2-4 of 12) scaled to the backbone's depth."""

    pool: int = setting(10, "Expert prompts in the pool (E-prompts, each with a learned key).", checks=(at_least(1),))
    general_length: int = setting(
        5, "Tokens of the general prompt (G-prompt) at each of its blocks.", checks=(at_least(1), PROMPT_TOKENS)
    )
    expert_length: int = setting(
        5, "Tokens of an expert prompt at each of its blocks.", checks=(at_least(1), PROMPT_TOKENS)
    )
    general_blocks: tuple = setting((), f"Blocks the G-prompt enters ({BLOCKS}; empty: DualPrompt's 0-1 of 12 scaled).")
    expert_blocks: tuple = setting((), f"Blocks the E-prompt enters ({BLOCKS}; empty: DualPrompt's 2-4 of 12 scaled).")
    pull: float = setting(
        1.0,
        "lambda of the key-matching loss lambda (1 - cos(q(x), k_s(x))) that pulls the chosen key to the query.",
        checks=(non_negative(),),
    )


declare(
    "fed-dualprompt",
    "raysim.algorithms.fed_dualprompt.method:FedDualPrompt",
    "DualPrompt with FedAvg: a general prompt + an expert prompt picked per sample by learned keys (FGPT's baseline)",
    family="group prompts",
    options=DualPromptOptions,
)
