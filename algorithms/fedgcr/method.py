"""FedGCR (Zheng et al., "FedGCR: Achieving Performance and Fairness for Federated Learning with Distinct Client
Types via Group Customization and Reweighting", AAAI 2024), and its two halves for the
paper's ablation (Table 5): ``fedgc`` (customisation, FedAvg aggregation) and ``fedgr`` (plain prompts,
reweighted aggregation). All three cluster the clients anonymously, as the ablation does.

FedGC: n global prompts p; GC-Net maps the frozen backbone's class token (cached once per run) to the
type-specific prompt h; the second pass runs with prompts p_j + h before block 0; the head reads the class
token z. Each client sends h_tilde (Eq. 4) with its update; the server fits a Gaussian mixture to the round's
h_tilde (T' components) and returns the centres H and every client's cluster id. Local loss CE + lambda1 l_GC
+ lambda2 l_RA once centres exist (CE only before). A client keeps h_prev (its last h_tilde) and z_prev (its
rows' representations from its last local epoch) between participations; z0 comes from one pass with the
received parameters. A client that first takes part after round 1 has no cluster id yet and trains on CE
alone that round. FedGR: weights ~ omega_ij (L_ij^(1-beta) Lbar_i^beta)^(q+1), beta = delta (1 - gamma^(r-1)).
Without GC-Net (``fedgr``), h_tilde is the class-balanced mean of the frozen class token.

L_ij (``client_loss``): ``local`` (the paper) is the L that Algorithm 1's LocalUpdate returns: the objective it
trains (Eq. 6; CE alone in round 1, line 9) accumulated over every row of the last local epoch (line 3 resets L
each epoch), per row. Eq. 2 writes a sum over the rows, but calls L_k the empirical risk whose omega-weighted sum
is the centralised one (Eq. 1), which holds for the mean; a sum would also weigh a client by N^(q+2). ``global``
(the authors' code) is the mean CE of the global model after the previous aggregation on the client's train rows
(federated/train.py:363-368, read by utils/util.py:1133-1153): the model the client receives, measured before it
trains (their round 1 uses 1 for every client; raysim the initial model's loss).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from raysim.algorithms import _group_custom as gc
from raysim.algorithms._fairness import GLOBAL_LOSS, client_losses, last_epoch_mean, received_model_loss, with_data
from raysim.algorithms.fedavg.method import FedAvg
from raysim.base.prompts import PromptSlot, PromptSpec
from raysim.base.seeding import Purpose, derive_seed
from raysim.core import training
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.protocol import CachesRowFeatures, Diagnostics, ModelParts, SendsExtras, implements
from raysim.ops import contrastive, reweighting
from raysim.ops.aggregate import weighted_mean

REPR, CENTRES, CLUSTER = "client_repr", "gc_centres", "gc_cluster"  # update extra / broadcast extra / instruction
CLUSTER_OF, LATEST = "cluster_of", "latest_repr"  # server state: every client's cluster (-1: none) and h_tilde
FITTED = "centres_fitted"  # server state: how many rows of the centres the last fit made (< T' if fewer clients)
SLOT = "customized"
LOCAL_LOSS = "local_loss"  # metrics: Algorithm 1's L, the last local epoch's objective per row (client_loss=local)
LOSS_METRIC = {"local": LOCAL_LOSS, "global": GLOBAL_LOSS}  # fedgcr.client_loss -> the metric FedGR weighs as L_ij


@implements("fedgcr")
class FedGCR(CachesRowFeatures, SendsExtras, Diagnostics, FedAvg):
    each_update = "its server clusters the round's clients by each one's representation"
    record_dp = "its clients send a representation averaged over their data, which DP-SGD does not privatise"
    extras_sent: ClassVar[dict[str, str]] = {REPR: "h_tilde, the client's type-specific feature averaged over its data"}
    customize: ClassVar[bool] = True
    reweight: ClassVar[bool] = True

    @property
    def kind(self) -> str:
        return "cosine" if self.options.contrast == "code" else "dot"

    def parts(self, vit, generator) -> ModelParts:
        n = self.options.prompts
        if not self.customize:
            return ModelParts(
                PromptSpec(slots=(PromptSlot("shallow", (0,), length=n, init="normal"),), head_pooling="cls")
            )
        params = gc.gc_net_parameters(vit.embed_dim, generator)
        params["global_prompts"] = 0.02 * torch.randn(n, vit.embed_dim, generator=generator)
        spec = PromptSpec(slots=(PromptSlot(SLOT, (0,), length=n, dynamic=True),), head_pooling="cls")
        return ModelParts(spec, {name: torch.nn.Parameter(value) for name, value in params.items()})

    def row_features(self, model, x):
        return {"cls": gc.frozen_cls(model.vit, x)}

    def uplink_extras(self, state) -> dict[str, tuple[int, ...]]:
        return {REPR: tuple(state.server[LATEST].shape[1:])}

    def init_global(self, model, generator) -> GlobalState:
        clients, dim = self.config.federation.clients, model.vit.embed_dim
        server = {
            CLUSTER_OF: torch.full((clients,), -1, dtype=torch.int64),
            LATEST: torch.zeros(clients, dim),
            CENTRES: torch.zeros(self.options.clusters, dim),
            FITTED: torch.tensor(0),
        }
        return GlobalState(params=model.trainable_state(), server=server)

    def configure(self, round, state, client_ids) -> Broadcast:
        if not self.customize or round == 1:
            return Broadcast(state.params)
        cluster_of = state.server[CLUSTER_OF]
        instructions = {c: {CLUSTER: cluster_of[c].clone()} for c in client_ids if cluster_of[c] >= 0}
        return Broadcast(state.params, {CENTRES: state.server[CENTRES][: int(state.server[FITTED])]}, instructions)

    # client ------------------------------------------------------------------------------------------------

    def customized(self, model, x: torch.Tensor, cls: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits, z, h): the second pass with prompts p_j + h(x); z is the class token after the final norm."""
        h = gc.gc_net(model.extra, cls)
        prompts = model.extra["global_prompts"][None] + h[:, None, :]
        tokens, slices = model.forward_features(x, {SLOT: prompts[:, None]})
        return model.forward_head(tokens, slices), tokens[:, 0], h

    def predict(self, model, x, data, rows):
        if not self.customize:
            return model(x)
        return self.customized(model, x, self._cls(data, rows, x.device))[0]

    @staticmethod
    def _cls(data, rows, device) -> torch.Tensor:
        """The cached class tokens of ``rows`` (an index array or a slice), copied: on Ray the shard block is
        read-only shared memory, which a tensor must not alias."""
        return torch.tensor(data.features["cls"][rows], device=device)

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model, device = ctx.model, ctx.device
        received = received_model_loss(self, ctx, broadcast, data) if self.options.client_loss == "global" else None
        model.load_trainable(broadcast.params)
        labels = torch.tensor(data.labels)  # a copy: the shard block is read-only
        if self.customize:
            objective, z_last = self._objective(model, broadcast, ctx.instructions, client_state, data, device)
        else:
            objective, z_last = (lambda x, y, rows: torch.nn.functional.cross_entropy(model(x), y)), None
        losses, sizes = [], []

        def recorded(x, y, rows):
            loss = objective(x, y, rows)
            losses.append(loss.item())
            sizes.append(len(rows))
            return loss

        metrics = training.local_train(ctx, data, recorded)
        if received is None:
            metrics[LOCAL_LOSS] = last_epoch_mean(losses, sizes, len(data))
        else:
            metrics[GLOBAL_LOSS] = received
        with torch.no_grad():
            h = self._cls(data, slice(None), device)
            h = (gc.gc_net(model.extra, h) if self.customize else h).cpu()
            h_tilde = contrastive.class_balanced_mean(h, labels) if len(data) else torch.zeros(h.shape[1])
        state = None if z_last is None else {"h_prev": h_tilde, "z_prev": z_last.cpu()}
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), {REPR: h_tilde}, metrics, state=state)

    def _objective(self, model, broadcast, instructions, client_state, data, device):
        """(Eq. 6's objective (inputs, labels, rows) -> loss, every row's z from its last step): CE, + lambda1 l_GC
        once the client has centres and a cluster id, + lambda2 l_RA once it also has z_prev."""
        o = self.options
        centres = broadcast.extras.get(CENTRES)
        cluster = int(instructions[CLUSTER]) if CLUSTER in instructions else None
        contrast = centres is not None and cluster is not None and len(data) > 0
        h_prev = client_state["h_prev"].to(device) if client_state else None
        z_prev = (
            client_state["z_prev"].to(device) if client_state and len(client_state["z_prev"]) == len(data) else None
        )
        align = contrast and z_prev is not None and o.lambda2 > 0
        z0 = self._representations(model, data, device) if align else None
        z_last = torch.zeros(len(data), model.vit.embed_dim, device=device)
        ra_tau = 1.0 if o.contrast == "code" else o.tau

        def objective(x, y, rows):
            logits, z, h = self.customized(model, x, self._cls(data, rows, device))
            z_last[rows] = z.detach()
            loss = torch.nn.functional.cross_entropy(logits, y)
            if contrast:
                loss = loss + o.lambda1 * contrastive.gc_loss(h, centres.to(device), cluster, h_prev, o.tau, self.kind)
            if align:
                loss = loss + o.lambda2 * contrastive.ra_loss(z, z0[rows], z_prev[rows], ra_tau, self.kind)
            return loss

        return objective, z_last

    @torch.no_grad()
    def _representations(self, model, data, device) -> torch.Tensor:
        """z0: every row's class token under the received parameters (one pass before training)."""
        parts = []
        for rows in training.batched_rows(len(data), training.PASS_BATCH):
            x = training.model_inputs(model, data.images[rows], device)
            parts.append(self.customized(model, x, self._cls(data, rows, device))[1])
        return torch.cat(parts)

    # server ------------------------------------------------------------------------------------------------

    def aggregate(self, round, state, updates) -> GlobalState:
        o = self.options
        updates = with_data(updates)
        clients = [u.client_id for u in updates]
        reps = torch.stack([u.extras[REPR] for u in updates]).float()
        latest = state.server[LATEST].clone()
        latest[clients] = reps
        known = torch.nonzero(state.server[CLUSTER_OF] >= 0).flatten().tolist()
        known = sorted(set(known) | set(clients))
        clusters = min(o.clusters, len(updates))  # fewer when some sampled clients had no data
        seed = derive_seed(self.config.federation.seed, Purpose.CLUSTER) % 2**32  # one per run: same h_tilde, same fit
        labels, centres, mixture = gc.cluster_clients(reps.numpy(), clusters, seed, o.covariance)
        cluster_of = state.server[CLUSTER_OF].clone()
        cluster_of[known] = torch.as_tensor(mixture.predict(latest[known].double().numpy()), dtype=torch.int64)
        cluster_of[clients] = torch.as_tensor(labels, dtype=torch.int64)
        new_centres = state.server[CENTRES].clone()
        new_centres[:clusters] = torch.as_tensor(centres, dtype=new_centres.dtype)
        losses = client_losses(updates, LOSS_METRIC[o.client_loss])
        weights = self.aggregation_weights(round, losses, [u.num_samples for u in updates], labels)
        params = weighted_mean([u.params for u in updates], weights)
        server = {CLUSTER_OF: cluster_of, LATEST: latest, CENTRES: new_centres, FITTED: torch.tensor(clusters)}
        return GlobalState(params=params, server=server)

    def aggregation_weights(self, round: int, losses, sizes, clusters) -> torch.Tensor | list[int]:
        """FedGR's weights (Eq. 3, beta from Eq. 5; the code form with beta = delta), or N_i for ``fedgc``."""
        o = self.options
        if not self.reweight:
            return list(sizes)
        beta = o.delta if o.reweighting == "code" else reweighting.fedgr_beta(round, o.delta, o.gamma)
        return reweighting.fedgr_weights(losses, sizes, clusters, beta, o.q, o.reweighting, round)

    def diagnostics(self, round, state, updates, shards, evaluated):
        cluster_of = state.server[CLUSTER_OF].numpy()
        clients = [u.client_id for u in updates if u.num_samples > 0]
        metrics = {"clusters_used": float(len(np.unique(cluster_of[clients]))) if clients else 0.0}
        if shards.client_domain is not None and clients:
            metrics["cluster_acc"] = gc.cluster_accuracy(cluster_of[clients], shards.client_domain[clients])
        return metrics, {"round": round, "clusters": {str(c): int(cluster_of[c]) for c in clients}}


@implements("fedgc")
class FedGC(FedGCR):
    reweight = False


@implements("fedgr")
class FedGR(FedGCR):
    customize = False
