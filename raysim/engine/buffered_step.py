"""The server step of asynchronous mode: a buffer of arrived updates, each trained from the model of its download,
applied to the current model with a weight that decays with its staleness tau (server versions since the download).

- ``federation.buffer`` K > 1, FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
  AISTATS 2022, Algorithm 1): each client's delta Delta_i = x_i - x_{tau_i} (what it trained minus what it received)
  is weighted by s(tau_i) and moved onto the current model x, and the method's own aggregation averages the K moved
  updates: m = aggregate({x + s(tau_i) Delta_i}); the server then steps x <- x + eta_g (m - x) with
  ``federation.server_lr`` eta_g. With FedAvg's sample-weighted mean, s = 1 and eta_g = 1 this is
  x + sum_i p_i Delta_i, a synchronous round's step on the same updates.
- K = 1, FedAsync (Xie et al., "Asynchronous Federated Optimization", 2019, Algorithm 1): the arrived model x_i
  mixes into the current one, x <- (1 - a) x + a x_i with a = ``federation.async_alpha`` s(tau + 1) (their
  staleness t - tau counts the version the update lands in, so an update from the newest model has 1); the method's
  aggregation of the one update gives x_i (and its server state). Under ``compression.downlink`` the client
  trained from the public model x^_tau, not from x_tau: its model is taken as x_tau + (x_i - x^_tau), what it would
  have trained from x_tau, so that the server's residual x_tau - x^_tau is not lost (:mod:`raysim.engine.downlink`).

The method's own aggregation keeps what it does besides the mean (SGPT's selection counts, server momentum, a
capacity tier's row masks), so every method whose server step is a weighted sum of updates runs asynchronously.
"""

from __future__ import annotations

import dataclasses

from raysim.core.messages import ClientUpdate, GlobalState, Tensors
from raysim.ops.staleness import Staleness


@dataclasses.dataclass(frozen=True)
class Arrival:
    """A buffered update, the parameters its client received, and its staleness tau; ``model``: the server's model
    when the client downloaded, where that differs from what it received (a compressed broadcast), else None."""

    update: ClientUpdate
    received: Tensors
    staleness: int
    model: Tensors | None = None


def moved(current: Tensors, update: ClientUpdate, received: Tensors, weight: float = 1.0) -> ClientUpdate:
    """An update moved onto the current model: x + s (x_i - x_received) for every tensor the client received (a
    tensor it did not receive is taken as sent). FedBuff's view of a stale update, weight s(tau); a compressed
    broadcast's, weight 1 (:mod:`raysim.engine.downlink`)."""
    params = {
        name: current[name] + weight * (tensor - received[name]) if name in received else tensor
        for name, tensor in update.params.items()
    }
    return dataclasses.replace(update, params=params)


def buffered_step(
    method, round: int, state: GlobalState, arrivals: list[Arrival], fed, staleness: Staleness
) -> GlobalState:
    """The server version ``round`` from the buffer ``arrivals`` (see the module's docstring)."""
    if len(arrivals) == 1 and fed.buffer_size == 1:
        (arrival,) = arrivals
        update = arrival.update if arrival.model is None else moved(arrival.model, arrival.update, arrival.received)
        mixed = method.aggregate(round, state, [update])
        # Xie et al.'s staleness t - tau counts the version the update lands in: 1 for the newest model's client
        rate = fed.async_alpha * staleness(arrival.staleness + 1)
    else:
        moved_updates = [moved(state.params, a.update, a.received, staleness(a.staleness)) for a in arrivals]
        mixed = method.aggregate(round, state, moved_updates)
        rate = fed.server_lr
    if rate == 1.0:
        return mixed
    params = {name: x + rate * (mixed.params[name] - x) for name, x in state.params.items()}
    return GlobalState(params, mixed.server)
