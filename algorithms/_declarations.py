"""What several methods' declarations share, torch-free: the prompt options of the VPT baselines (Jia et al.,
ECCV 2022), the block lists of the prompt methods, the group-prompt diagnostics and the split family's facts."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.base.prompts import POOLINGS
from raysim.base.settings import Settings, at_least, at_most, setting

LAYER_READINGS = ("paper", "code")  # how a select_layer number is read: see _group_prompts.query_depth
BLOCKS = "list of 0-based block indices"

GROUP_METRICS = (  # group prompts' per-round diagnostics (_group_prompts.GroupDiagnostics)
    "groups_selected",
    "q_entropy",
    "cluster_top_share",
    "cluster_groups_used",
    "cluster_acc",
    "kmeans_congruence",
)
SPLIT_TRAFFIC = ("activations", "gradients", "spsa", "params")
SPLIT_METRICS = (
    "lr_server",
    "server_compute_s",
    "server_concurrency",
    "client_compute_s",
    "transfer_s",
    *(f"bytes_{kind}" for kind in SPLIT_TRAFFIC),
)
SPLIT_FP32 = "the encoder server computes in float32 and byte counts assume float32 activations"
SPLIT = dict(family="split", metrics=SPLIT_METRICS, bf16=False)
# a prompt's tokens join every sequence, and a block's attention costs the square of the sequence's tokens: at 1,000
# prompt tokens a step of the default backbone takes 30 times as long as at 10, at 3,000 about 200 times
PROMPT_TOKENS = at_most(1000, "a block's attention costs the square of its tokens; VPT's longest prompt is 200")


@dataclass(frozen=True)
class PromptOptions(Settings):
    """Prompt length and head pooling, shared by the prompt-tuning baselines (VPT, Jia et al., ECCV 2022)."""

    prompt_length: int = setting(
        10, "Prompt tokens entering before the first block (VPT-shallow).", checks=(at_least(1), PROMPT_TOKENS)
    )
    head_pooling: str = setting(
        "backbone",
        "What the classifier head reads: the backbone's own pooling, the class token, or the mean of the class token "
        "and the prompt outputs.",
        choices=POOLINGS,
    )
