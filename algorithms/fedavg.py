"""FedAvg with full fine-tuning (McMahan et al., AISTATS 2017): every backbone weight and the head train
and are communicated. The heavy baseline that prompt tuning is compared against in SGPT/FGPT."""

from raysim.method import Method
from raysim.models.prompted import PromptSpec
from raysim.registry import register


@register("fedavg", "FedAvg, full fine-tuning of backbone + head (McMahan et al. 2017)")
class FedAvg(Method):
    def prompt_spec(self, depth: int) -> PromptSpec:
        return PromptSpec(train_backbone=True)
