"""Head-Tune: FedAvg on the linear classifier only, over a frozen backbone (the papers' linear-probe baseline)."""

from raysim.algorithms.fedavg.method import FedAvg
from raysim.base.prompts import PromptSpec
from raysim.core.protocol import ModelParts, implements


@implements("head-tune")
class HeadTune(FedAvg):
    def parts(self, vit, generator) -> ModelParts:
        return ModelParts(PromptSpec())
