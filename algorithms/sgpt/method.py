"""SGPT: shared and group prompt tuning (Deng et al., "Unlocking the Potential of Prompt-Tuning in Bridging
Generalized and Personalized Federated Learning", CVPR 2024).

Shared prompts enter the blocks U_S (growing sequence, zero init); one group prompt per block of U_G is
chosen per sample by Select(x) = argmax_g cos(q(x), k_g), with q the frozen backbone's class token (cached
once per run). Training selects with the q_g-calibrated rule and adds L_key; local training is block
coordinate descent (Block I: shared prompts + head; Block II: group prompts + keys + head, shared frozen).
The server averages head, shared and group prompts with N_i / N, keys with N_g^i / sum_i N_g^i, accumulates
v_g and applies momentum to keys and group prompts (Eq. 7). The global keys and group prompts *are* the
momentum buffers k_hat, p_hat (k_hat^0 = k^0), so the only server state is v.

Defaults follow the paper; where the authors' code (github.com/ubc-tea/SGPT, commit 213c95b) differs, an option
selects it: ``key_fallback_at_most=50``, ``select_layer_as=code``, ``select_per=batch`` (their Office/DomainNet
runs), ``shared_length_at=first``; ``shared_init=zeros`` is theirs and the default, the paper being silent.

Ablations (SGPT Tables 3-4): ``bcd`` joint | bcd | bcd-inv, ``prompts`` shared | group | both,
``key_rule`` plain | qg, ``momentum`` on/off, ``head_pooling`` cls | cls+group.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from raysim.algorithms import _group_prompts as gp
from raysim.algorithms.fedavg.method import FedAvg
from raysim.algorithms.sgpt import SGPTOptions
from raysim.base.prompts import PromptSlot, PromptSpec, xavier_prompt
from raysim.base.seeding import Purpose, derive_seed
from raysim.core import training
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.protocol import CachesRowFeatures, CohortPhase, ModelParts, ResolvesOptions, SendsExtras, implements
from raysim.ops import selection as sel

SHARED, GROUP = "prompts.shared", "extra.group_prompts"  # SHARED prefixes every shared-prompt tensor
KEYS, HEAD = "extra.selection_keys", ("vit.head.weight", "vit.head.bias")
SHARE = "selection_share"  # broadcast extra: the cumulative shares q_g
COUNTS = gp.COUNTS  # update extra: N_g^i


@implements("sgpt")
class SGPT(gp.GroupDiagnostics, CachesRowFeatures, SendsExtras, ResolvesOptions, FedAvg):
    extras_sent = gp.COUNTS_SENT
    private_extras = gp.COUNTS_PRIVATE
    record_dp = gp.COUNTS_NOT_RECORD_PRIVATE

    def bounded_extra(self, name, tensor):
        return gp.count_shares(tensor)

    @property
    def uses_groups(self) -> bool:
        return self.options.prompts != "shared"

    def shared_blocks(self, depth: int) -> tuple[int, ...]:
        """U_S: ``shared_blocks`` or the paper's 1st-3rd of 12 blocks scaled to ``depth``."""
        return gp.check_blocks("sgpt.shared_blocks", self.options.shared_blocks or gp.paper_blocks(depth, 0, 3), depth)

    def group_blocks(self, depth: int) -> tuple[int, ...]:
        """U_G: ``group_blocks`` or the paper's 4th-6th of 12 blocks scaled to ``depth``."""
        return gp.check_blocks("sgpt.group_blocks", self.options.group_blocks or gp.paper_blocks(depth, 3, 3), depth)

    def resolved_options(self, depth: int) -> SGPTOptions:
        """The blocks of the prompts in use and the query's block, as the model is built with them."""
        o = self.options
        return replace(
            o,
            shared_blocks=self.shared_blocks(depth) if o.prompts != "group" else o.shared_blocks,
            group_blocks=self.group_blocks(depth) if self.uses_groups else o.group_blocks,
            select_layer=gp.query_layer("sgpt.select_layer", o.select_layer, depth),
        )

    def parts(self, vit, generator: torch.Generator) -> ModelParts:
        o, depth = self.options, len(vit.blocks)
        gp.query_layer("sgpt.select_layer", o.select_layer, depth)
        slots = list(self.shared_slots(depth)) if o.prompts != "group" else []
        if not self.uses_groups:
            return ModelParts(PromptSpec(slots=tuple(slots), head_pooling="cls"))
        slots.append(PromptSlot("group", self.group_blocks(depth), length=1, mode=o.group_mode, dynamic=True))
        g, d = o.groups, vit.embed_dim
        bank = xavier_prompt(vit, (g, len(self.group_blocks(depth)), 1, d), generator)
        extras = {
            "selection_keys": torch.nn.Parameter(sel.orthogonal_keys(g, d, generator)),
            "group_prompts": torch.nn.Parameter(bank),
        }
        return ModelParts(PromptSpec(slots=tuple(slots), head_pooling="cls"), extras)

    def shared_slots(self, depth: int) -> tuple[PromptSlot, ...]:
        """P_S: ``shared_length`` tokens at every block of U_S, or (``shared_length_at=first``) at the first block and
        one at each later block, as the slot ``shared_rest``."""
        o, blocks = self.options, self.shared_blocks(depth)
        first = o.shared_length_at == "first" and len(blocks) > 1
        slots = [PromptSlot("shared", blocks[:1] if first else blocks, length=o.shared_length, init=o.shared_init)]
        if first:
            slots.append(PromptSlot("shared_rest", blocks[1:], length=1, init=o.shared_init))
        return tuple(slots)

    @property
    def caches_rows(self) -> bool:
        return self.uses_groups

    def row_features(self, model, x: torch.Tensor) -> dict[str, torch.Tensor]:
        o = self.options
        layer = gp.query_layer("sgpt.select_layer", o.select_layer, len(model.vit.blocks))
        return {"query": gp.backbone_query(model.vit, x, layer, reading=o.select_layer_as)}

    def uplink_extras(self, state) -> dict[str, tuple[int, ...]]:
        return {COUNTS: (self.options.groups,)} if self.uses_groups else {}

    def rows_left_out(self, update: ClientUpdate) -> dict[str, torch.Tensor]:
        return gp.unchosen(update, KEYS)

    def init_global(self, model, generator) -> GlobalState:
        server = {"selection_total": torch.zeros(self.options.groups, dtype=torch.float64)} if self.uses_groups else {}
        return GlobalState(params=model.trainable_state(), server=server)

    def configure(self, round, state, client_ids) -> Broadcast:
        if not self.uses_groups or self.options.key_rule == "plain":
            return Broadcast(state.params)
        return Broadcast(state.params, {SHARE: sel.shares(state.server["selection_total"]).float()})

    # client ------------------------------------------------------------------------------------------------

    def logits(self, model, x: torch.Tensor, groups: torch.Tensor | None) -> torch.Tensor:
        """Forward with the group prompts of ``groups`` (one per sample), or without group prompts (None)."""
        dynamic = None if groups is None else {"group": model.extra["group_prompts"][groups]}
        pool = ("group",) if dynamic and self.options.head_pooling == "cls+group" else ()
        return model.head_from(model.run_blocks(model.embed(x), 0, len(model.vit.blocks), dynamic), pool=pool)

    def steps(self, model, broadcast) -> list[tuple[tuple[str, ...], object]]:
        """Block coordinate descent as (trainable tensors, step) in order; a step maps (x, y, cached queries) to
        (loss, the groups it selected, or a zero scalar for Block I)."""
        o, share = self.options, broadcast.extras.get(SHARE)

        def shared_step(x, y, query):
            return torch.nn.functional.cross_entropy(self.logits(model, x, None), y), x.new_zeros(())

        def group_step(x, y, query):
            cos = sel.cosine(query.to(x.device), model.extra["selection_keys"])
            with torch.no_grad():
                picked = sel.select_calibrated(cos, share, o.eps) if share is not None else cos.argmax(dim=1)
                picked = sel.modal(picked, o.groups) if o.select_per == "batch" else picked
            loss = torch.nn.functional.cross_entropy(self.logits(model, x, picked), y) + sel.key_loss(cos, picked)
            return loss, picked

        shared_part = {n for n in model.trainable_names() if n.startswith(SHARED)} | set(HEAD)
        group_part = {GROUP, KEYS} | set(HEAD)
        if o.prompts == "shared":
            plan = [(shared_part, shared_step)]
        elif o.prompts == "group" or o.bcd == "joint":
            plan = [(set(model.trainable_names()), group_step)]
        else:
            plan = [(shared_part, shared_step), (group_part, group_step)]
            plan = plan[::-1] if o.bcd == "bcd-inv" else plan
        return [(tuple(sorted(names)), step) for names, step in plan]

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model = ctx.model
        model.load_trainable(broadcast.params)
        picks = []

        def objective(step):
            def run(x, y, rows):
                loss, picked = step(x, y, torch.tensor(data.features["query"][rows]) if self.uses_groups else None)
                picks.append(picked)
                return loss

            return run

        metrics = {"steps": 0, "samples": 0, "compute_s": 0.0}
        for number, (names, step) in enumerate(self.steps(model, broadcast)):
            with model.training_only(names):  # each block shuffles with its own seed
                block_ctx = replace(ctx, seed=derive_seed(ctx.seed, Purpose.BLOCK, number))
                block = training.local_train(block_ctx, data, objective(step))
            metrics = {k: metrics[k] + block[k] for k in metrics} | {"train_loss": block["train_loss"]}
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), self._counts(picks), metrics)

    def cohort_phases(self, model, broadcast) -> list[CohortPhase]:
        return [
            CohortPhase(names, lambda x, y, f, step=step: step(x, y, f.get("query")), block=number)
            for number, (names, step) in enumerate(self.steps(model, broadcast))
        ]

    def cohort_update(self, ctx, broadcast, trained, aux, metrics) -> ClientUpdate:
        picks = [picked for phase in aux for picked in phase]
        return ClientUpdate(ctx.client_id, int(metrics.pop("rows")), trained, self._counts(picks), metrics)

    def _counts(self, picks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """N_g^i: the groups selected over the client's group steps (none for Block I's zero scalars)."""
        if not self.uses_groups:
            return {}
        counts = torch.zeros(self.options.groups, dtype=torch.float64)
        for picked in picks:
            if picked.dim():
                counts += sel.counts(picked, self.options.groups)
        return {COUNTS: counts}

    def predict(self, model, x, data, rows):
        """Inference: plain Select(x) = argmax_g cos(q(x), k_g) per sample (no q_g calibration, no batch mode)."""
        if not self.uses_groups:
            return self.logits(model, x, None)
        return self.logits(model, x, gp.cached_cosine(data, rows, model.extra["selection_keys"]).argmax(dim=1))

    # server ------------------------------------------------------------------------------------------------

    def aggregate(self, round, state, updates) -> GlobalState:
        if not self.uses_groups:
            return super().aggregate(round, state, updates)
        o = self.options
        params, group_counts = gp.aggregate_with_counts(updates, KEYS, o.key_fallback_at_most)
        if o.momentum:
            params[KEYS] = sel.momentum(state.params[KEYS], params[KEYS], o.alpha_k)
            params[GROUP] = sel.momentum(state.params[GROUP], params[GROUP], o.alpha_g)
        total = state.server["selection_total"] + group_counts.sum(dim=0).clamp(min=0)  # noised under DP: never < 0
        return GlobalState(params=params, server={**state.server, "selection_total": total})
