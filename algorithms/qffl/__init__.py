"""q-FFL (Li, Sanjabi, Beirami, Smith, ICLR 2020) on prompts + head: the declaration (description, family, options,
capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PromptOptions
from raysim.base.settings import non_negative, setting
from raysim.core.registry import declare


@dataclass(frozen=True)
class QFFLOptions(PromptOptions):
    """q-FFL (Li, Sanjabi, Beirami, Smith, ICLR 2020): the q-FedAvg server step."""

    q: float = setting(
        1.0,
        "q, the fairness exponent: clients weigh by F_k^q.",
        checks=(non_negative("0 is FedAvg: the data-weighted average of the clients' models"),),
    )
    lipschitz: float = setting(
        0.0,
        "L, the Lipschitz constant that turns a model change into a gradient (0: 1 / train.lr, the paper's with plain "
        "SGD: train.optimizer=sgd, train.momentum=0).",
        checks=(non_negative("0 = 1 / train.lr"),),
    )


declare(
    "qffl",
    "raysim.algorithms.qffl.method:QFFL",
    "q-FFL: q-FedAvg server step weighing clients by loss^q, on prompts + head (Li et al. 2020)",
    family="fairness",
    options=QFFLOptions,
)
