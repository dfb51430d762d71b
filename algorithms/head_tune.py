"""Head-Tune: FedAvg on the linear classifier only, over a frozen backbone (the papers' linear-probe baseline)."""

from raysim.method import Method
from raysim.models.prompted import PromptSpec
from raysim.registry import register


@register("head-tune", "FedAvg of the classifier head only, frozen backbone (linear probe)")
class HeadTune(Method):
    def prompt_spec(self, depth: int) -> PromptSpec:
        return PromptSpec()
