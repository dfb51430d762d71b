"""FedMix (Yoon, Shin, Hwang, Yang, "FedMix: Approximation of Mixup under Mean Augmented Federated Learning", ICLR
2021), a baseline of SGPT (Table 1), FGPT (Table 1) and FedGCR (Tables 1-2), on prompts + head.

Mean augmented FL: a client sends the mean of its inputs x_bar and of its one-hot labels y_bar once, on its first
participation (extras ``data_mean``, ``label_mean``); the server keeps their sums and sends every client the means
over the clients so far (extras ``global_data_mean``, ``global_label_mean``). The local loss is the paper's
first-order approximation of global mixup with the shared means (Sec. 3), per sample, s = (1 - lam) x:

    l = (1-lam) CE(f(s), y) + lam CE(f(s), y_bar_g) + lam <d l1/d s, x_bar_g>,   l1 = (1-lam) CE(f(s), y)

and the server takes FedAvg's sample-weighted mean. The means are of the inputs the backbone sees (resized and
normalised). lam = 0.05: FedGCR's code (``federated/train.py``) and the paper's CIFAR-10 value.

Privacy cost: averaged raw data leave the client. One mean image per client, over all its training rows (Flower's
reproduction of the paper), is the least revealing choice the method allows, but a client with few rows, or rows
of one class, sends something close to its images; its label mean is its label distribution. FGPT notes the cost
("requires the sharing of additional information (averaged images)", Sec. 4.2). The uplink is counted once per
client (C x H x W + K floats), the global means every round (they change as clients join).

Deviations: the paper averages the loss over other clients' means j; terms 2 and 3 are linear in (x_bar_j, y_bar_j),
so that average equals using the mean of the means, which is what is sent (it includes the client's own mean, and
with one mean per client it is exact; the authors' code pairs each row with one random shared mean instead). The
input gradient is each row's own (the authors' code takes it of the batch mean, 1/B as large; FedGCR's code also
drops the label-mean term). Before any client has shared its means (round 1) clients train on plain cross-entropy.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core import training
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.protocol import SendsExtras, implements
from raysim.ops.mixup import fedmix_loss

X_MEAN, Y_MEAN = "data_mean", "label_mean"  # a client's means, sent once
GLOBAL_X, GLOBAL_Y = "global_data_mean", "global_label_mean"  # the mean of the clients' means, sent every round
X_SUM, Y_SUM, SHARED = "data_mean_sum", "label_mean_sum", "clients_shared"  # server state
SENT = "means_sent"  # client state: it has shared its means


@implements("fedmix")
class FedMix(SendsExtras, FedVPT):
    sent_once = frozenset({X_MEAN, Y_MEAN})
    extras_sent: ClassVar[dict[str, str]] = {
        X_MEAN: "the mean of the client's images",
        Y_MEAN: "the mean of its one-hot labels",
    }
    record_dp = "its clients send their images' and labels' means, which DP-SGD does not privatise"

    def init_global(self, model, generator) -> GlobalState:
        size = model.input_spec[0]
        server = {
            X_SUM: torch.zeros(model.vit.in_chans, size, size, dtype=torch.float64),
            Y_SUM: torch.zeros(model.vit.num_classes, dtype=torch.float64),
            SHARED: torch.zeros((), dtype=torch.float64),
        }
        return GlobalState(params=model.trainable_state(), server=server)

    def uplink_extras(self, state) -> dict[str, tuple[int, ...]]:
        return {X_MEAN: tuple(state.server[X_SUM].shape), Y_MEAN: tuple(state.server[Y_SUM].shape)}

    def configure(self, round, state, client_ids) -> Broadcast:
        count = state.server[SHARED].clamp_min(1)
        means = {GLOBAL_X: (state.server[X_SUM] / count).float(), GLOBAL_Y: (state.server[Y_SUM] / count).float()}
        return Broadcast(state.params, means)

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model, lam = ctx.model, self.options.lam
        model.load_trainable(broadcast.params)
        first = client_state is None and len(data) > 0
        extras = self.local_means(ctx, data, len(broadcast.extras[GLOBAL_Y])) if first else {}
        x_mean, y_mean = (broadcast.extras[k].to(ctx.device) for k in (GLOBAL_X, GLOBAL_Y))
        if y_mean.sum() > 0:
            with sdpa_kernel(SDPBackend.MATH):  # the fused CPU attention has no double backward
                metrics = training.local_train(
                    ctx, data, lambda x, y, rows: fedmix_loss(model, x, y, x_mean, y_mean, lam)
                )
        else:  # nobody has shared means yet
            metrics = training.local_train(ctx, data, lambda x, y, rows: self.loss(model, model(x), y, broadcast))
        state = {SENT: torch.ones(1)} if first else None  # None: the client keeps what it had
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), extras, metrics, state)

    @staticmethod
    def local_means(ctx, data, num_classes: int) -> dict[str, torch.Tensor]:
        """The mean model input and the label distribution of the client's training rows."""
        labels = torch.from_numpy(np.bincount(data.labels, minlength=num_classes)) / len(data)
        return {X_MEAN: training.mean_input(ctx.model, data, ctx.device).float(), Y_MEAN: labels.float()}

    def aggregate(self, round, state, updates) -> GlobalState:
        """FedAvg, and the newly shared means added to the server's sums."""
        params = super().aggregate(round, state, updates).params
        sharing = [u for u in updates if X_MEAN in u.extras]
        server = dict(state.server)
        for key, name in ((X_SUM, X_MEAN), (Y_SUM, Y_MEAN)):
            server[key] = state.server[key] + sum(u.extras[name].double() for u in sharing)
        server[SHARED] = state.server[SHARED] + len(sharing)
        return GlobalState(params=params, server=server)
