"""Fed-DualPrompt: DualPrompt (Wang et al., "DualPrompt: Complementary Prompting for Rehearsal-free Continual
Learning", ECCV 2022) with FedAvg, FGPT's baseline (Sec. 4.2, Table 1, Table 11).

A general prompt (G-prompt, shared by every input) enters before the first blocks; an expert prompt (E-prompt) from
a pool of ``pool`` prompts with learned keys k_e enters before later blocks, chosen per sample by its query q(x), the
frozen prompt-free backbone's final class token (``embedding_key="cls"``, cached once per run):

    s(x) = argmax_e cos(q(x), k_e);   l = CE(f(x; g, p_s(x)), y) + lambda (1 - cos(q(x), k_s(x)))

and the server averages G-prompt, E-prompt pool, keys and head with N_i / N. Defaults are DualPrompt's CIFAR-100
configuration (``google-research/l2p`` ``configs/cifar100_dualprompt.py``): G-prompt length 5 at blocks 0-1, pool
10 of length 5 at blocks 2-4 (of 12, scaled to the backbone as SGPT's layouts), top-1, lambda 1, keys U[0, 0.01),
class-token classifier.

Deviations: prompt tuning (tokens prepended at each listed block, the sequence growing as in their prompt-tuning
variant) rather than their default prefix tuning, which raysim's prompt wrapper lacks; prompts start in VPT's Xavier
range. The continual-learning machinery is left out, as FGPT's federated setting has no tasks: no task-id prompt
mask, no logit mask, no batch-wise majority selection. FGPT gives no layout or hyperparameters ("fine-tuned").
"""

from __future__ import annotations

import torch

from raysim.algorithms import _group_prompts as gp
from raysim.algorithms.fedavg.method import FedAvg
from raysim.base.prompts import PromptSlot, PromptSpec, xavier_prompt
from raysim.core import training
from raysim.core.messages import ClientUpdate
from raysim.core.protocol import CachesRowFeatures, ModelParts, implements
from raysim.ops import selection as sel


@implements("fed-dualprompt")
class FedDualPrompt(CachesRowFeatures, FedAvg):
    def parts(self, vit, generator: torch.Generator) -> ModelParts:
        o, depth, dim = self.options, len(vit.blocks), vit.embed_dim
        general = gp.check_blocks(
            "fed-dualprompt.general_blocks", o.general_blocks or gp.paper_blocks(depth, 0, 2), depth
        )
        expert = gp.check_blocks("fed-dualprompt.expert_blocks", o.expert_blocks or gp.paper_blocks(depth, 2, 3), depth)
        slots = (
            PromptSlot("general", general, length=o.general_length),
            PromptSlot("expert", expert, length=o.expert_length, dynamic=True),
        )
        extras = {
            "expert_prompts": torch.nn.Parameter(
                xavier_prompt(vit, (o.pool, len(expert), o.expert_length, dim), generator)
            ),
            "prompt_keys": torch.nn.Parameter(torch.empty(o.pool, dim).uniform_(0.0, 0.01, generator=generator)),
        }
        return ModelParts(PromptSpec(slots=slots, head_pooling="cls"), extras)

    def row_features(self, model, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"query": gp.backbone_query(model.vit, x, len(model.vit.blocks), relu=False)}

    def select(self, model, data, rows) -> tuple[torch.Tensor, torch.Tensor]:
        keys = model.extra["prompt_keys"]
        return sel.pool_select(torch.tensor(data.features["query"][rows]).to(keys), keys)

    def logits(self, model, x: torch.Tensor, picked: torch.Tensor) -> torch.Tensor:
        return model(x, {"expert": model.extra["expert_prompts"][picked]})

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model = ctx.model
        model.load_trainable(broadcast.params)

        def objective(x, y, rows):
            picked, pull = self.select(model, data, rows)
            return torch.nn.functional.cross_entropy(self.logits(model, x, picked), y) + self.options.pull * pull

        metrics = training.local_train(ctx, data, objective)
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), metrics=metrics)

    def predict(self, model, x, data, rows):
        return self.logits(model, x, self.select(model, data, rows)[0])
