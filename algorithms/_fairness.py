"""Loss-reporting for the fairness methods (FedGR, q-FFL, AFL, TERM), beside them: what a client measures before
training, and which updates carry a loss to weigh. The weights themselves are :mod:`raysim.ops.reweighting`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from raysim.core import training
from raysim.core.messages import ClientUpdate

GLOBAL_LOSS = "global_loss"  # metrics key: mean CE of the received global model on the client's train rows


def client_losses(updates: Sequence[ClientUpdate], key: str = GLOBAL_LOSS) -> np.ndarray:
    """The per-client loss metric ``key`` of the updates, in their order."""
    return np.array([u.metrics[key] for u in updates], dtype=np.float64)


class ReportsGlobalLoss:
    """Mixin for a method: before local training, measure F_k, the received global model's mean cross-entropy on
    the client's train rows, and report it as ``metrics["global_loss"]``."""

    def client_update(self, ctx, broadcast, client_state, data):
        ctx.model.load_trainable(broadcast.params)
        loss = training.mean_loss(ctx.model, data, ctx.device, lambda x, rows: self.predict(ctx.model, x, data, rows))
        update = super().client_update(ctx, broadcast, client_state, data)
        update.metrics[GLOBAL_LOSS] = loss
        return update


def with_data(updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
    """The updates of clients that trained on at least one row (the others have no loss to weigh)."""
    return [u for u in updates if u.num_samples > 0]
