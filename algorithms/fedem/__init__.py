"""FedEM (Marfoq et al., NeurIPS 2021), K prompt + head components mixed per client: the declaration (description,
family, options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import at_least, at_most, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class EMOptions(PromptOptions):
    """FedEM (Marfoq et al., NeurIPS 2021): the number of mixture components."""

    components: int = setting(
        3,
        "Mixture components K: prompt + head sets mixed per client by EM.",
        checks=(at_least(1), at_most(100, "a client trains and evaluates every component; the paper's K is 3")),
    )


declare(
    "fedem",
    "raysim.algorithms.fedem.method:FedEM",
    "FedEM: K prompt + head components, per-client mixture weights learned by EM (Marfoq et al. 2021)",
    family="personalised",
    options=EMOptions,
)
