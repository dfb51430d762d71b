"""pFedPG (Yang, Wang, Wang, ICCV 2023), a server prompt generator and personal heads: the declaration (description,
family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import non_negative, positive, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class PGOptions(PromptOptions):
    """pFedPG (Yang, Wang, Wang, ICCV 2023): the server's prompt generator."""

    server_lr: float = setting(1e-3, "Adam learning rate of the server's prompt generator.", checks=(positive(),))
    heads: int = setting(
        0, "Attention heads of the generator's attention.", checks=(non_negative("0: the backbone's attention heads"),)
    )


declare(
    "pfedpg",
    "raysim.algorithms.pfedpg.method:PFedPG",
    "pFedPG: a server prompt generator gives each client its prompts; personal heads (Yang et al. 2023)",
    family="personalised",
    options=PGOptions,
)
