"""pFedHN (Shamsian et al., ICML 2021), a hypernetwork generating each client's prompts + head: the declaration
(description, family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import at_least, at_most, in_range, non_negative, positive, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class HNOptions(PromptOptions):
    """pFedHN (Shamsian et al., ICML 2021): the server hypernetwork and its optimiser (SGD)."""

    embed_dim: int = setting(
        -1,
        "Size e of each client's learned embedding v_i (-1: 1 + clients / 4, the paper's).",
        checks=((lambda v: v >= 1 or v == -1, "must be at least 1 (-1: 1 + clients / 4)"),),
    )
    hidden: int = setting(100, "Width of the hypernetwork's hidden layers.", checks=(at_least(1),))
    hidden_layers: int = setting(
        3,
        "Hidden layers of the hypernetwork after its first.",
        checks=(non_negative(), at_most(100, "each runs in every round's generation; the paper's are 3")),
    )
    hn_lr: float = setting(1e-2, "Learning rate of the hypernetwork and the embeddings.", checks=(positive(),))
    hn_momentum: float = setting(
        0.9, "SGD momentum of the hypernetwork's optimiser.", checks=(in_range(0, 1, open_high=True),)
    )
    hn_weight_decay: float = setting(1e-3, "Weight decay of the hypernetwork's optimiser.", checks=(non_negative(),))
    clip: float = setting(50.0, "Gradient-norm clip of the hypernetwork's step.", checks=(positive(),))
    evaluate: str = setting(
        "generated",
        "What a client that trained is evaluated with: 'generated', theta_i = h(v_i; phi) from the current "
        "hypernetwork (the paper's personal model; the authors' evaluate), or 'trained', the tensors it trained from "
        "its theta_i when it last took part.",
        choices=("generated", "trained"),
    )


declare(
    "pfedhn",
    "raysim.algorithms.pfedhn.method:PFedHN",
    "pFedHN: a server hypernetwork maps client embeddings to personal prompts + head (Shamsian et al. 2021)",
    family="personalised",
    options=HNOptions,
)
