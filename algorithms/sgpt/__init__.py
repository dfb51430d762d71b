"""SGPT: shared and group prompt tuning (Deng et al., CVPR 2024): the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import BLOCKS, GROUP_METRICS, LAYER_READINGS, PROMPT_TOKENS
from raysim.base.settings import Settings, at_least, in_range, non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class SGPTOptions(Settings):
    """SGPT (Deng et al., CVPR 2024); empty block lists mean the paper's layout scaled to the backbone's depth. Where
    the authors' code (github.com/ubc-tea/SGPT) differs from the paper, an option selects it; the defaults are the
    paper's, but two: ``eps`` (the code's; the paper's Eq. 6 is eps = 0), and ``group_mode`` (the code's: group
    prompts join the sequence at each block of U_G; the paper's Alg. 3 replaces the previous group output)."""

    groups: int = setting(10, "G, the number of group prompts and learned keys.", checks=(at_least(1),))
    shared_blocks: tuple = setting(
        (), f"U_S, the blocks shared prompts enter ({BLOCKS}; empty: the paper's 1-3 of 12)."
    )
    group_blocks: tuple = setting((), f"U_G, the blocks group prompts enter ({BLOCKS}; empty: the paper's 4-6 of 12).")
    select_layer: int = setting(
        0, "The block whose frozen class token is the selection query q(x) (0: the last).", checks=(non_negative(),)
    )
    bcd: str = setting(
        "bcd",
        "Local training: block coordinate descent (Block I shared prompts + head, then Block II group prompts + keys "
        "+ head), the inverse order, or both blocks jointly (Table 3).",
        choices=("joint", "bcd", "bcd-inv"),
    )
    prompts: str = setting(
        "both", "Which prompts train: shared, group or both (Table 3).", choices=("shared", "group", "both")
    )
    key_rule: str = setting(
        "qg",
        "Selection in training: the q_g-calibrated rule against collapse, or plain argmax cos(q(x), k_g).",
        choices=("plain", "qg"),
    )
    eps: float = setting(
        5e-4,
        "eps of the q_g-calibrated selection, argmin (1 - cos)(q_g + eps) (the authors' code, clusters_g; the "
        "paper's Eq. 6 is eps = 0, where a group never chosen always wins).",
        checks=(non_negative(),),
    )
    momentum: bool = setting(True, "Server momentum on keys and group prompts (Eq. 7).")
    alpha_k: float = setting(
        0.5, "alpha_k, the keys' momentum.", checks=(in_range(0, 1, open_high=True, why="0 turns momentum off"),)
    )
    alpha_g: float = setting(
        0.5,
        "alpha_g, the group prompts' momentum.",
        checks=(in_range(0, 1, open_high=True, why="0 turns momentum off"),),
    )
    group_mode: str = setting(
        "insert",
        "Each block of U_G adds its group prompt to the sequence (the authors' code: the head reads the class token "
        "and |U_G| group outputs) or puts it in place of the previous block's group output (the paper's Alg. 3: the "
        "head reads one).",
        choices=("insert", "replace"),
    )
    head_pooling: str = setting(
        "cls+group",
        "What the head reads: the class token, or the mean of the class token and the group prompts' outputs.",
        choices=("cls", "cls+group"),
    )
    key_fallback_at_most: int = setting(
        0,
        "Keys of a group chosen at most this many times in a round (sum_i N_g^i) take the plain mean 1/m instead of "
        "N_g^i / sum_i N_g^i (0: only groups nobody chose, the paper; 50: the authors' code).",
        checks=(non_negative("0: the paper; 50: the authors' code"),),
    )
    select_layer_as: str = setting(
        "paper",
        "How select_layer L is read: 'paper', the class token after block L (Sec. 2.2); 'code', blocks 0..L then the "
        "final norm.",
        choices=LAYER_READINGS,
    )
    select_per: str = setting(
        "sample",
        "Selection in training per sample (Eq. 5-6), or per batch: every sample takes the batch's most frequent group "
        "(the authors' code on Office and DomainNet). Inference selects per sample.",
        choices=("sample", "batch"),
    )
    shared_length: int = setting(
        1,
        "Tokens of the shared prompt (the paper's prompt length).",
        checks=(at_least(1, "no shared prompts: prompts=group"), PROMPT_TOKENS),
    )
    shared_length_at: str = setting(
        "every",
        "Which blocks of U_S get shared_length tokens: every one, or the first only, the later ones 1 (the authors' "
        "code).",
        choices=("every", "first"),
    )
    shared_init: str = setting(
        "zeros",
        "How shared prompts start: zeros (the authors' code) or VPT's Xavier range.",
        choices=("zeros", "xavier"),
    )


declare(
    "sgpt",
    "raysim.algorithms.sgpt.method:SGPT",
    "shared + group prompts with learned key selection, q_g anti-collapse, BCD and momentum (CVPR 2024)",
    family="group prompts",
    options=SGPTOptions,
    metrics=GROUP_METRICS,
    cohort=True,
)
