"""Loss-reporting for the fairness methods (FedGR, q-FFL, AFL, TERM), beside them: what a client measures, before
or while training, and which updates carry a loss to weigh. The weights themselves are
:mod:`raysim.ops.reweighting`.
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


def received_model_loss(method, ctx, broadcast, data) -> float:
    """F_k: the received global model's mean cross-entropy on the client's train rows (``method.predict``'s
    logits), with ``broadcast.params`` loaded into ``ctx.model``; NaN without rows."""
    ctx.model.load_trainable(broadcast.params)
    return training.mean_loss(ctx.model, data, ctx.device, lambda x, rows: method.predict(ctx.model, x, data, rows))


def last_epoch_mean(step_losses: Sequence[float], step_rows: Sequence[int], rows: int) -> float:
    """The objective accumulated over the last local epoch, per row: each step's batch-mean loss times its rows,
    summed over the trailing steps that cover ``rows`` rows (one epoch), divided by ``rows``; NaN without steps."""
    total, seen = 0.0, 0
    for loss, n in zip(reversed(step_losses), reversed(step_rows)):
        if seen >= rows:
            break
        total, seen = total + loss * n, seen + n
    return total / seen if seen else float("nan")


class ReportsGlobalLoss:
    """Mixin for a method: before local training, measure F_k (:func:`received_model_loss`) and report it as
    ``metrics["global_loss"]``."""

    each_update = "its server weighs each client by the loss it reports"
    record_dp = "its clients report their data's loss, which DP-SGD does not privatise, and its server reads it"

    def client_update(self, ctx, broadcast, client_state, data):
        loss = received_model_loss(self, ctx, broadcast, data)
        update = super().client_update(ctx, broadcast, client_state, data)
        update.metrics[GLOBAL_LOSS] = loss
        return update


def with_data(updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
    """The updates of clients that trained on at least one row (the others have no loss to weigh)."""
    return [u for u in updates if u.num_samples > 0]
