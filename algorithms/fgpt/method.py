"""FGPT and FGPT-U: group-aware prompt tuning with fixed orthogonal keys (Deng, Thrampoulidis, Li, "Heterogeneous
Federated Learning with Group-Aware Prompt Tuning").

Shared prompts (length 5) enter before the first block (VPT-shallow); one group prompt enters before the 0-based block u
(the paper's layer 6 of 12, counted from 1, is u = 5; scaled to the backbone), chosen per sample by argmax_g cos(q(x),
b_g) with fixed keys b_g that never train (orthogonal; ``keys=random`` is the paper's ablation) and q(x) the frozen
backbone's class token (Eq. 5; ``query=relu`` applies a ReLU first, as SGPT's authors do). Training is joint
cross-entropy with no q_g calibration and no momentum. The server averages head and shared prompts with N_i / N and each
group prompt with beta_g^i = N_g^i / sum_i N_g^i. FGPT-U (inference only) averages the logits of the top-K groups; the
blocks before u run once and only blocks u..U-1 run per group: (u + K (U - u)) / U passes.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from raysim.algorithms import _group_prompts as gp
from raysim.algorithms.fedavg.method import FedAvg
from raysim.algorithms.fgpt import FGPTOptions
from raysim.base.errors import ConfigError
from raysim.base.prompts import PromptSlot, PromptSpec, xavier_prompt
from raysim.core import training
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.protocol import CachesRowFeatures, CohortPhase, ModelParts, ResolvesOptions, SendsExtras, implements
from raysim.ops import selection as sel

GROUP, COUNTS, FIXED_KEYS = "extra.group_prompts", gp.COUNTS, gp.FIXED_KEYS


@implements("fgpt")
class FGPT(gp.GroupDiagnostics, CachesRowFeatures, SendsExtras, ResolvesOptions, FedAvg):
    extras_sent = gp.COUNTS_SENT
    private_extras = gp.COUNTS_DROPPED
    record_dp = gp.COUNTS_NOT_RECORD_PRIVATE

    def bounded_extra(self, name, tensor):
        return gp.count_shares(tensor)

    top_k = 1  # groups whose logits are averaged at inference

    def group_block(self, depth: int) -> int:
        """u: the block the group prompt enters before (blocks 0..u-1 run once in FGPT-U)."""
        u = self.options.group_block if self.options.group_block >= 0 else gp.paper_blocks(depth, 5, 1)[0]
        if u >= depth:
            raise ConfigError(f"fgpt.group_block={u} is outside the backbone's blocks 0..{depth - 1}")
        return u

    def resolved_options(self, depth: int) -> FGPTOptions:
        return replace(
            self.options,
            group_block=self.group_block(depth),
            select_layer=gp.query_layer("fgpt.select_layer", self.options.select_layer, depth),
        )

    def parts(self, vit, generator) -> ModelParts:
        depth = len(vit.blocks)
        gp.query_layer("fgpt.select_layer", self.options.select_layer, depth)
        slots = [PromptSlot("group", (self.group_block(depth),), length=1, dynamic=True)]
        if self.options.shared_length:
            slots.insert(0, PromptSlot("shared", (0,), length=self.options.shared_length, init="xavier"))
        g, d = self.options.groups, vit.embed_dim
        make = sel.orthogonal_keys if self.options.keys == "orthogonal" else sel.random_keys
        keys = torch.nn.Parameter(make(g, d, generator), requires_grad=False)
        extras = {"fixed_keys": keys, "group_prompts": torch.nn.Parameter(xavier_prompt(vit, (g, 1, 1, d), generator))}
        return ModelParts(PromptSpec(slots=tuple(slots), head_pooling="cls"), extras)

    def row_features(self, model, x):
        layer = gp.query_layer("fgpt.select_layer", self.options.select_layer, len(model.vit.blocks))
        relu = self.options.query == "relu"
        return {"query": gp.backbone_query(model.vit, x, layer, relu, reading=self.options.select_layer_as)}

    def uplink_extras(self, state) -> dict[str, tuple[int, ...]]:
        return {COUNTS: (self.options.groups,)}

    def rows_left_out(self, update: ClientUpdate) -> dict[str, torch.Tensor]:
        return gp.unchosen(update, GROUP)

    def init_global(self, model, generator) -> GlobalState:
        return GlobalState(
            params=model.trainable_state(), server={FIXED_KEYS: model.extra["fixed_keys"].detach().clone()}
        )

    def logits(self, model, x: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """The mean logits over ``groups`` ``[B, K]``: blocks before u once, blocks u.. once per column."""
        depth = len(model.vit.blocks)
        u = self.group_block(depth)
        prefix = model.run_blocks(model.embed(x), 0, u)
        bank = model.extra["group_prompts"]
        branches = [
            model.head_from(model.run_blocks(prefix, u, depth, {"group": bank[groups[:, j]]}), pool=())
            for j in range(groups.shape[1])
        ]
        return torch.stack(branches).mean(dim=0)

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model, groups = ctx.model, self.options.groups
        model.load_trainable(broadcast.params)
        selected_counts = torch.zeros(groups, dtype=torch.float64)

        def step(x, y, rows):
            nonlocal selected_counts
            picked = gp.cached_cosine(data, rows, model.extra["fixed_keys"]).argmax(dim=1)
            selected_counts += sel.counts(picked, groups)
            return torch.nn.functional.cross_entropy(self.logits(model, x, picked[:, None]), y)

        metrics = training.local_train(ctx, data, step)
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), {COUNTS: selected_counts}, metrics)

    def cohort_phases(self, model, broadcast) -> list[CohortPhase]:
        """The same joint step as :meth:`client_update`, with each step's selected groups as its aux."""

        def objective(x, y, features):
            picked = sel.cosine(features["query"].to(x.device), model.extra["fixed_keys"]).argmax(dim=1)
            return torch.nn.functional.cross_entropy(self.logits(model, x, picked[:, None]), y), picked

        return [CohortPhase(tuple(model.trainable_names()), objective)]

    def cohort_update(self, ctx, broadcast, trained, aux, metrics) -> ClientUpdate:
        (picks,) = aux
        counts = (
            sel.counts(torch.cat(picks), self.options.groups)
            if picks
            else torch.zeros(self.options.groups, dtype=torch.float64)
        )
        return ClientUpdate(ctx.client_id, int(metrics.pop("rows")), trained, {COUNTS: counts}, metrics)

    def predict(self, model, x, data, rows):
        """FGPT: the best group; FGPT-U: the mean logits of the top-K groups by cosine."""
        cos = gp.cached_cosine(data, rows, model.extra["fixed_keys"])
        return self.logits(model, x, cos.topk(self.top_k, dim=1).indices)

    def aggregate(self, round, state, updates) -> GlobalState:
        return GlobalState(params=gp.aggregate_with_counts(updates, GROUP)[0], server=state.server)


@implements("fgpt-u")
class FGPTU(FGPT):
    @property
    def top_k(self) -> int:
        return self.options.k
