"""FedVPT-D: VPT-deep (Jia et al., ECCV 2022) with FedAvg: new prompt tokens at every block, each block's
tokens replacing the previous block's prompt outputs. Options are shared with ``fedvpt``."""

from raysim.algorithms.fedavg.method import FedAvg
from raysim.base.prompts import PromptSlot, PromptSpec
from raysim.core.protocol import ModelParts, implements


@implements("fedvpt-d")
class FedVPTDeep(FedAvg):
    def parts(self, vit, generator) -> ModelParts:
        slot = PromptSlot(
            "deep", blocks=tuple(range(len(vit.blocks))), length=self.options.prompt_length, mode="replace"
        )
        return ModelParts(PromptSpec(slots=(slot,), head_pooling=self.options.head_pooling))
