"""FedVPT-D: VPT-deep (Jia et al., ECCV 2022) with FedAvg: new prompt tokens at every block, each block's
tokens replacing the previous block's prompt outputs. Options are shared with ``fedvpt``."""

from raysim.algorithms.fedvpt import PromptOptions
from raysim.method import Method
from raysim.models.prompted import PromptSlot, PromptSpec
from raysim.registry import register


@register("fedvpt-d", "deep prompt tuning (VPT-deep, prompts at every block) + head with FedAvg")
class FedVPTDeep(Method):
    Options = PromptOptions
    options_key = "fedvpt"

    def prompt_spec(self, depth: int) -> PromptSpec:
        slot = PromptSlot("deep", blocks=tuple(range(depth)), length=self.options.prompt_length, mode="replace")
        return PromptSpec(slots=(slot,), head_pooling=self.options.head_pooling)
