"""pFedPG (Yang, Wang, Wang, "Efficient Model Personalization in Federated Learning via Client-Specific Prompt
Generation", ICCV 2023), a SGPT baseline (Tables 1-2): a server prompt generator, personal prompts and heads.

The server learns a prompt basis P_base ``[L, D]``, a descriptor d_n per client and attention weights; client n's
prompt is one descriptor token attending over the basis, added to it:

    P_n = P_base + MHA(q = d_n W_q, K = P_base W_k, V = P_base W_v) W_o

sent to the client alone (``Broadcast.instructions``). The client adapts P_n and its own head H_n for E epochs of
cross-entropy (personalised prompt adaptation) and keeps both (its state, what it is evaluated with). The server
(personalised prompt generation) treats dP_n = P_n - P~_n as the gradient at P_n and backpropagates it through the
generator, phi = {P_base, d, W_q, W_k, W_v, W_o}: grad_phi = mean_n (d P_n / d phi)^T dP_n (each descriptor its own
client's), one Adam step (lr ``server_lr``) per round. Heads: the backbone's attention heads (``heads`` 0).

Deviations: no authors' code exists; the generator follows the paper's figures and the two public re-implementations
(residual form with one descriptor token, as ``PeiYauWeng/Probabilistic_Prompt_Aggregation_Baseline``). The head is
personal, but every trained tensor crosses the protocol: heads go up too, and their N_n-weighted mean is the head a
client starts from on its first participation (and what unseen clients are evaluated with, with the prompt generated
from the mean descriptor); the paper's clients start from the initial head. That head is broadcast to all.
"""

from __future__ import annotations

import math

import torch

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.algorithms.pfedhn.method import server_part
from raysim.base.errors import ConfigError
from raysim.base.prompts import xavier_prompt
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState, Tensors
from raysim.core.protocol import Personalised, implements
from raysim.ops import hypernet as hn
from raysim.ops.aggregate import weighted_mean

PROMPT, HEAD = "prompts.shallow", ("vit.head.weight", "vit.head.bias")
GEN, FIRST, SECOND = "gen.", "adam_m.", "adam_v."  # server state prefixes: the generator, Adam's moments
DESCRIPTORS, STEPS, HEADS, SEEN = "descriptors", "adam_steps", "attention_heads", "participated"


@implements("pfedpg")
class PFedPG(Personalised, FedVPT):
    each_update = "its prompt generator steps on each client's delta with that client's descriptor"
    own_broadcast = "its prompt generator makes each client's own prompts"

    def init_global(self, model, generator) -> GlobalState:
        vit, clients, length = model.vit, self.config.federation.clients, self.options.prompt_length
        dim, heads = vit.embed_dim, self.options.heads or vit.blocks[0].attn.num_heads
        if dim % heads:
            raise ConfigError(f"pfedpg.heads={heads} must divide the backbone width {dim}")
        gen = {"base": xavier_prompt(vit, (length, dim), generator)}
        gen |= {w: hn.uniform((dim, dim), 1 / math.sqrt(dim), generator) for w in ("w_q", "w_k", "w_v", "w_o")}
        gen[DESCRIPTORS] = hn.uniform((clients, dim), 1.0, generator)
        server = {GEN + k: v for k, v in gen.items()}
        server |= {p + k: torch.zeros_like(v) for k, v in gen.items() for p in (FIRST, SECOND)}
        server |= {
            STEPS: torch.zeros((), dtype=torch.int64),
            HEADS: torch.tensor(heads),
            SEEN: torch.zeros(clients, dtype=torch.bool),
        }
        head = {k: v for k, v in model.trainable_state().items() if k in HEAD}
        return GlobalState({PROMPT: self.prompt(gen, gen[DESCRIPTORS].mean(dim=0), heads)} | head, server)

    @staticmethod
    def prompt(gen: Tensors, descriptor: torch.Tensor, heads: int) -> torch.Tensor:
        with torch.no_grad():
            return hn.attention_prompt(gen, descriptor, heads)[None]

    def configure(self, round, state, client_ids) -> Broadcast:
        """The head (for first participations) to all; each client's generated prompt to it alone."""
        gen, heads = server_part(state.server, GEN), int(state.server[HEADS])
        prompts = {c: {PROMPT: self.prompt(gen, gen[DESCRIPTORS][c], heads)} for c in client_ids}
        return Broadcast({k: state.params[k] for k in HEAD}, instructions=prompts)

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        head = broadcast.params if client_state is None else {k: client_state[k] for k in HEAD}
        update = super().client_update(ctx, Broadcast(ctx.instructions | head), None, data)
        update.state = update.params
        return update

    def eval_params(self, params, client_state):
        return params if client_state is None else client_state

    def aggregate(self, round, state, updates) -> GlobalState:
        """One Adam step of the generator from the prompt deltas; the heads' weighted mean for newcomers."""
        gen, heads = server_part(state.server, GEN), int(state.server[HEADS])
        weights = {k: v for k, v in gen.items() if k != DESCRIPTORS}

        def generate(w, d):
            return {PROMPT: hn.attention_prompt(w, d, heads)[None]}

        deltas = {
            u.client_id: {PROMPT: self.prompt(gen, gen[DESCRIPTORS][u.client_id], heads) - u.params[PROMPT]}
            for u in updates
        }
        grads, rows = hn.delta_gradients(generate, weights, gen[DESCRIPTORS], deltas)
        grads[DESCRIPTORS] = rows
        server, step = dict(state.server), int(state.server[STEPS]) + 1
        for k, g in grads.items():
            moments = (state.server[FIRST + k], state.server[SECOND + k])
            server[GEN + k], (server[FIRST + k], server[SECOND + k]) = hn.adam(
                gen[k], g, moments, step, self.options.server_lr
            )
        server[STEPS] = torch.tensor(step)
        server[SEEN] = state.server[SEEN].clone()
        server[SEEN][[u.client_id for u in updates]] = True
        new = server_part(server, GEN)
        head = weighted_mean([{k: u.params[k] for k in HEAD} for u in updates], [u.num_samples for u in updates])
        return GlobalState({PROMPT: self.prompt(new, new[DESCRIPTORS][server[SEEN]].mean(dim=0), heads)} | head, server)
