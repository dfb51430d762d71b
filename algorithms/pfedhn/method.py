"""pFedHN (Shamsian, Navon, Fetaya, Chechik, "Personalized Federated Learning using Hypernetworks", ICML 2021), a
FGPT baseline (Table 1), generating each client's prompts + head.

A server hypernetwork h(.; phi) maps client i's learned embedding v_i to its trained tensors theta_i = h(v_i; phi),
sent to the client alone (``Broadcast.instructions``). The client takes E epochs of local steps from theta_i to
theta~_i and sends them; the server, with dtheta_i = theta_i - theta~_i (Alg. 1, the authors' sign), steps

    phi <- phi - a mean_i (d theta_i / d phi)^T dtheta_i,    v_i <- v_i - a (d theta_i / d v_i)^T dtheta_i

with SGD (momentum 0.9, weight decay 1e-3, lr 1e-2 for phi and the embeddings) after clipping the gradient norm to
50. h is the authors' MLP: Linear(e, 100), 3 x [ReLU, Linear(100, 100)], one Linear(100, numel) per tensor; e = 1 +
M / 4; embeddings N(0, 1) (``experiments/pfedhn``). A client that has trained is evaluated with its personal model
h(v_i; phi) from the current hypernetwork (the paper's theta_i; the authors' ``evaluate`` loads ``hnet(node_id)``),
or (``evaluate=trained``) with the tensors it trained from its theta_i when it last took part. A client that has
not (held out, or not drawn yet) gets a new embedding, the mean of the learned ones, and is evaluated with
h(v_new; phi), which is the global parameters.

Deviations: the authors step the hypernetwork after each single client (5000 steps of one client, 50 inner
batches); with m clients per round here, one step with phi's gradient averaged over them. The paper trains a new
client's embedding on its data with phi frozen; raysim's held-out clients never train, so they are evaluated at
that embedding's starting point (no adaptation).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.algorithms.pfedhn import HNOptions
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState, Tensors, unprefixed
from raysim.core.protocol import Personalised, ResolvesOptions, implements
from raysim.ops import hypernet as hn

NET, MOMENTUM = "hn.", "hn_momentum."  # server state prefixes: the hypernetwork (incl. embeddings), its buffers
EMBEDDINGS, SEEN = "embeddings", "participated"


def server_part(server: Tensors, prefix: str) -> Tensors:
    """The server tensors under ``prefix``, unprefixed; copies, as BLAS results depend on memory alignment and
    tensors read from a checkpoint are not aligned (so a resumed run would differ in the last bits)."""
    return {k: v.clone() for k, v in unprefixed(server, prefix).items()}


@implements("pfedhn")
class PFedHN(Personalised, ResolvesOptions, FedVPT):
    each_update = "its hypernetwork steps on each client's delta with that client's embedding"
    own_broadcast = "its hypernetwork generates each client's own prompts and head"

    def resolved_options(self, depth: int) -> HNOptions:
        """embed_dim -1: the paper's 1 + N / 4 for N clients."""
        return replace(self.options, embed_dim=self.embed_dim)

    @property
    def embed_dim(self) -> int:
        o = self.options
        return o.embed_dim if o.embed_dim > 0 else int(1 + self.config.federation.clients / 4)

    def init_global(self, model, generator) -> GlobalState:
        o, clients = self.options, self.config.federation.clients
        targets = {k: tuple(v.shape) for k, v in model.trainable_state().items()}
        dim = self.embed_dim
        net = hn.mlp_hypernet(dim, o.hidden, o.hidden_layers, targets, generator)
        net[EMBEDDINGS] = torch.randn(clients, dim, generator=generator)
        server = {NET + k: v for k, v in net.items()} | {MOMENTUM + k: torch.zeros_like(v) for k, v in net.items()}
        server[SEEN] = torch.zeros(clients, dtype=torch.bool)
        return GlobalState(params=self.generate(net, net[EMBEDDINGS].mean(dim=0), targets), server=server)

    @staticmethod
    def generate(net: Tensors, embedding: torch.Tensor, targets: dict[str, tuple[int, ...]]) -> Tensors:
        with torch.no_grad():
            return hn.mlp_generate(net, embedding, targets)

    def configure(self, round, state, client_ids) -> Broadcast:
        """Nothing shared: each client gets h(v_i; phi)."""
        net, targets = server_part(state.server, NET), {k: tuple(v.shape) for k, v in state.params.items()}
        return Broadcast({}, instructions={c: self.generate(net, net[EMBEDDINGS][c], targets) for c in client_ids})

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        update = super().client_update(ctx, Broadcast(ctx.instructions), None, data)
        update.state = update.params
        return update

    def eval_params(self, params, client_state):
        return params if client_state is None else client_state

    def evaluated_states(self, state, client_ids, states):
        """``evaluate=generated``: h(v_i; phi) for each client of ``client_ids`` that has trained."""
        if self.options.evaluate == "trained":
            return states
        net, targets = server_part(state.server, NET), {k: tuple(v.shape) for k, v in state.params.items()}
        trained = state.server[SEEN]
        return {c: self.generate(net, net[EMBEDDINGS][c], targets) for c in client_ids if trained[c]}

    def aggregate(self, round, state, updates) -> GlobalState:
        """One SGD step of the hypernetwork and the round's embeddings from the deltas theta_i - theta~_i."""
        o, net = self.options, server_part(state.server, NET)
        targets = {k: tuple(v.shape) for k, v in state.params.items()}
        weights = {k: v for k, v in net.items() if k != EMBEDDINGS}

        def generate(w, v):
            return hn.mlp_generate(w, v, targets)

        sent = {u.client_id: self.generate(net, net[EMBEDDINGS][u.client_id], targets) for u in updates}
        deltas = {u.client_id: {k: sent[u.client_id][k] - u.params[k] for k in targets} for u in updates}
        grads, rows = hn.delta_gradients(generate, weights, net[EMBEDDINGS], deltas)
        grads[EMBEDDINGS] = rows
        clipped = dict(zip(grads, hn.clip_by_norm(list(grads.values()), o.clip), strict=True))
        server = dict(state.server)
        for k, g in clipped.items():
            server[NET + k], server[MOMENTUM + k] = hn.sgd_momentum(
                net[k], g, state.server[MOMENTUM + k], o.hn_lr, o.hn_momentum, o.hn_weight_decay
            )
        server[SEEN] = state.server[SEEN].clone()
        server[SEEN][[u.client_id for u in updates]] = True
        new = server_part(server, NET)
        return GlobalState(self.generate(new, new[EMBEDDINGS][server[SEEN]].mean(dim=0), targets), server)
