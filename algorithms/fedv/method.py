"""FedV and FedVZ: federated split learning with a pretrained transformer ("Heterogeneous Federated
Learning with Splited Language Model", Algorithm 1).

Each client owns a head (patch embedding, plus ``head_blocks`` blocks) and a tail (``tail_blocks`` blocks, final
norm, classifier); the server owns the encoder between (:mod:`raysim.split`). Every local step runs head ->
server -> tail and updates head and tail by backpropagation through the server. Once per round the server
steps from each participating client's last local step:

- FedV: the true gradient of that step's loss with respect to the encoder;
- FedVZ: the SPSA estimate g_i = [L(w + eps z_i) - L(w - eps z_i)] / (2 eps) * z_i, z_i ~ N(0, I) over all encoder
  weights (eq. 5; Algorithm 1 drops the "* z", a typo). The client computes the two losses with its tail from the
  server's two perturbed outputs and sends back the scalar; z_i is regenerated from a seed, never stored.

w <- w - (lr_server / m) * sum_i g_i, lr_server halved (``lr_decay``) every ``decay_every`` rounds: the paper gives
the decay rate 0.5 but not its period. At rounds t = 0, fedround, 2 fedround, ... (Algorithm 1 line 20, t counted
from 0: raysim's rounds 1, fedround + 1, ...) the participating clients' heads and tails are averaged (1/m) and every
client continues from the average; between, each client keeps its own (personalised: evaluated with its own).

``client_init``: "random" (the paper, Algorithm 1 line 1: "Randomly initialize the local weights of the head and
tail pairs for each client i") gives each client its own draw (:func:`~raysim.algorithms._split.random_head_and_tail`,
seeded by the run seed and the client id); as the first average comes at t = 0, only round 1's clients train from
their draws and every later client starts from an average. "pretrained" starts every client from the backbone's
pretrained patch embedding and norm with the run's fresh classifier (raysim's earlier default).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from raysim.algorithms import _split as split
from raysim.algorithms.fedavg.method import FedAvg
from raysim.algorithms.fedv import SplitOptions
from raysim.base.errors import ConfigError
from raysim.base.prompts import PromptSpec
from raysim.base.seeding import Init, Purpose, derive_seed
from raysim.core import training
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.protocol import Diagnostics, ModelParts, Personalised, SplitLearning, implements
from raysim.ops.aggregate import tensor_bytes, weighted_mean
from raysim.ops.spsa import spsa_coefficient

SPSA = "spsa_coefficient"


def server_lr(options: SplitOptions, round: int) -> float:
    """lr_server * lr_decay ** floor((round - 1) / decay_every)."""
    return options.lr_server * options.lr_decay ** ((round - 1) // options.decay_every)


@implements("fedv")
class FedV(SplitLearning, Personalised, Diagnostics, FedAvg):
    server_class = split.EncoderServer

    def server_segment(self, depth: int) -> tuple[int, int]:
        head, tail = self.options.head_blocks, self.options.tail_blocks
        if head + tail >= depth:
            raise ConfigError(
                f"{self.info.options_key}.head_blocks={head} + tail_blocks={tail} leave the server none of the "
                f"backbone's {depth} blocks; keep head_blocks + tail_blocks <= {depth - 1}"
            )
        return head, depth - tail

    def client_stand_in(self) -> split.RemoteEncoder:
        return split.RemoteEncoder(None)

    def parts(self, vit, generator) -> ModelParts:
        self.server_segment(len(vit.blocks))  # a bad split point fails here, before the run starts
        return ModelParts(PromptSpec(train_backbone=True))

    def init_global(self, model, generator) -> GlobalState:
        """The shared head and tail (``params``; drawn from ``generator`` for ``client_init=random``) and the encoder
        (``server``, ``encoder.*``) from the built model."""
        start, stop = self.server_segment(len(model.vit.blocks))
        params, encoder = {}, {}
        for name, tensor in model.trainable_state().items():
            parts = name.split(".")
            if parts[:2] == ["vit", "blocks"] and start <= int(parts[2]) < stop:
                encoder[split.PREFIX + ".".join([str(int(parts[2]) - start), *parts[3:]])] = tensor
            else:
                params[name] = tensor
        if self.options.client_init == "random":
            params.update(
                split.random_head_and_tail(model.vit, int(torch.randint(0, 2**62, (1,), generator=generator)))
            )
        return GlobalState(params=params, server=encoder)

    def averages(self, round: int) -> bool:
        """Whether heads and tails are averaged after this (1-based) round: t % fedround = 0 with t = round - 1."""
        return (round - 1) % self.options.fedround == 0

    def own_head_and_tail(self, ctx, client_state) -> dict:
        """The random head and tail a client draws for itself (only before the first average, so in round 1)."""
        if client_state is not None or ctx.round > 1 or self.options.client_init != "random":
            return {}
        return split.random_head_and_tail(ctx.model.vit, client_init_seed(ctx.config, ctx.client_id))

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        """Local steps through the server from the client's own head and tail (its draw in round 1 with
        ``client_init=random``, else the last average until it has trained its own)."""
        model, view = ctx.model, broadcast.params
        own = self.own_head_and_tail(ctx, client_state)
        received = {} if client_state is not None else {k: v for k, v in view.items() if k not in own}
        model.load_trainable({**view, **own} if client_state is None else client_state)
        remote = split.remote_encoder(model)
        remote.begin(ctx.client_id)
        last = training.steps_per_round(len(data), ctx.config.train)
        steps, extra = itertools.count(1), {}

        def objective(x, y, rows):
            if next(steps) == last:
                extra.update(self.last_step(ctx, remote, x, y))
            return F.cross_entropy(model(x), y)

        metrics = training.local_train(ctx, data, objective)
        tensors = model.trainable_state()
        counters = remote.counters
        counters["bytes_down_params"] = float(tensor_bytes(received))
        counters["bytes_up_params"] = float(tensor_bytes(tensors)) if self.averages(ctx.round) else 0.0
        return ClientUpdate(ctx.client_id, len(data), tensors, metrics={**metrics, **counters, **extra}, state=tensors)

    def last_step(self, ctx, remote, x, y) -> dict[str, float]:
        """FedV: the last step's backward leaves its (smashed features, gradient) pair on the server."""
        remote.keep_next_backward = True
        return {}

    def update_server(self, round, server, updates) -> dict[str, float]:
        lr = server_lr(self.options, round)
        server.step_gradient([u.client_id for u in updates if u.metrics.get("steps", 0) > 0], lr)
        return server_metrics(server, lr)

    def aggregate(self, round, state, updates) -> GlobalState:
        """At t % fedround = 0 (:meth:`averages`): the unweighted mean (1/m, Algorithm 1 line 21) of the heads and
        tails."""
        if not self.averages(round):
            return state
        trained = [u.params for u in updates if u.num_samples > 0]
        return GlobalState(params=weighted_mean(trained, [1.0] * len(trained)), server=state.server)

    def resets_client_states(self, round: int) -> bool:
        return self.averages(round)

    def eval_params(self, params, client_state):
        return params if client_state is None else client_state

    def traffic(self, round, broadcast, sampled, received) -> tuple[float, float]:
        """What crossed the cut: activations, gradients, SPSA outputs and scalars, heads and tails when sent."""

        def total(way: str) -> float:
            return float(sum(u.metrics.get(f"bytes_{way}_{kind}", 0.0) for u in received for kind in split.KINDS))

        return total("down"), total("up")

    def diagnostics(self, round, state, updates, shards, evaluated):
        """Bytes per kind (both ways), and client compute vs time waiting on the server net of its compute."""
        stats = [u.metrics for u in updates]
        metrics = {
            f"bytes_{kind}": float(sum(s.get(f"bytes_{way}_{kind}", 0.0) for s in stats for way in ("up", "down")))
            for kind in split.KINDS
        }
        wait = sum(s.get("server_wait_s", 0.0) for s in stats)
        metrics["client_compute_s"] = sum(s.get("compute_s", 0.0) for s in stats) - wait
        metrics["transfer_s"] = max(0.0, wait - sum(s.get("server_compute_s", 0.0) for s in stats))
        return metrics, {}


@implements("fedvz")
class FedVZ(FedV):
    def last_step(self, ctx, remote, x, y) -> dict[str, float]:
        """The two losses of this batch at w +- eps z (head and tail as at this step), reduced to the SPSA scalar."""
        model, start, stop = ctx.model, *self.server_segment(len(ctx.model.vit.blocks))
        eps = self.options.eps
        with torch.no_grad():
            h, sizes = model.run_blocks(model.embed(x), 0, start)
            plus, minus = remote.perturbed(h, spsa_seed(ctx.config, ctx.round, ctx.client_id), eps)
            losses = [
                F.cross_entropy(model.head_from(model.run_blocks((out, sizes), stop, len(model.vit.blocks))), y)
                for out in (plus, minus)
            ]
        remote.counters["bytes_up_spsa"] += 8.0  # the scalar goes back to the server
        return {SPSA: spsa_coefficient(losses[0].item(), losses[1].item(), eps)}

    def update_server(self, round, server, updates) -> dict[str, float]:
        lr = server_lr(self.options, round)
        estimates = [
            (spsa_seed(self.config, round, u.client_id), u.metrics[SPSA]) for u in updates if SPSA in u.metrics
        ]
        server.step_spsa(estimates, lr)
        return server_metrics(server, lr)


def server_metrics(server, lr: float) -> dict[str, float]:
    """The round's server step size, its compute seconds (the clients' requests and the update) and the most
    requests it served at once."""
    compute_s, peak = server.end_round()
    return {"lr_server": lr, "server_compute_s": compute_s, "server_concurrency": float(peak)}


def client_init_seed(config, client: int) -> int:
    """The seed of a client's own random head and tail: the classifier's initialisation seed keyed by the client."""
    return derive_seed(config.federation.seed, Purpose.INIT, Init.WRAPPER, client)


def spsa_seed(config, round: int, client: int) -> int:
    """The seed of z for (round, client): derived, so the server regenerates z at its update."""
    return derive_seed(config.federation.seed, Purpose.SERVER, round, client)
