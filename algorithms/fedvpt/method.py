"""FedVPT ("PT-FedAvg" in SGPT/FGPT): visual prompt tuning (Jia et al., ECCV 2022) with FedAvg.

VPT-shallow: ``prompt_length`` learnable tokens enter after CLS before the first block; prompts and the
head train and are averaged with N_i / N. The backbone stays frozen.
"""

from raysim.algorithms.fedavg.method import FedAvg
from raysim.base.prompts import PromptSlot, PromptSpec
from raysim.core.protocol import ModelParts, implements


@implements("fedvpt")
class FedVPT(FedAvg):
    def parts(self, vit, generator) -> ModelParts:
        slot = PromptSlot("shallow", blocks=(0,), length=self.options.prompt_length, mode="insert")
        return ModelParts(PromptSpec(slots=(slot,), head_pooling=self.options.head_pooling))
