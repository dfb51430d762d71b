"""The round loop, written once: sample -> configure -> client updates -> aggregate -> evaluate.

:class:`Simulation` owns the global state and the clients' persistent state and hands client work to an
executor (in-process, or a pool of Ray workers). It runs in the driver for the sequential backend and
inside the ``Coordinator`` actor for the Ray backend: the same code, hence the same numbers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from raysim.errors import BadUpdateError
from raysim.metrics import accuracy_metrics, client_accuracies
from raysim.method import ClientResult, GlobalState, Method, Tensors
from raysim.registry import get_method
from raysim.seeding import sample_clients
from raysim.split import split_encoder


log = logging.getLogger("raysim")


def screen(results: list[ClientResult], params: Tensors) -> tuple[list[ClientResult], dict[int, str]]:
    """Split off poisoned results: a communicated tensor missing, of the wrong shape, or with NaN/Inf.

    Returns the results to aggregate and, per rejected client, why (one line naming the client and tensor).
    """
    kept, rejected = [], {}
    for result in results:
        reason = None
        for name, reference in params.items():
            tensor = result.update.get(name)
            if tensor is None or tuple(tensor.shape) != tuple(reference.shape):
                got = "nothing" if tensor is None else f"shape {tuple(tensor.shape)}"
                reason = f"{name}: expected shape {tuple(reference.shape)}, got {got}"
            elif tensor.is_floating_point() and not torch.isfinite(tensor).all():
                reason = f"{name} has NaN or Inf"
            if reason:
                break
        if reason:
            rejected[result.client_id] = f"client {result.client_id} ({reason})"
        else:
            kept.append(result)
    return kept, rejected


class Executor(Protocol):
    """Runs client work somewhere; results come back in any order."""

    def train(self, round: int, view: Tensors, tasks: list) -> list[ClientResult]: ...

    def evaluate(self, view: Tensors, client_ids: list[int], states: dict[int, Tensors]) -> dict[int, tuple[int, int]]: ...

    def shutdown(self) -> None: ...


@dataclass
class RoundReport:
    """One round's metrics (MLflow keys), on evaluated rounds every client's accuracy, and the method's
    diagnostic records (kept by the driver for the end-of-run pictures)."""

    round: int
    metrics: dict[str, float]
    client_acc: dict[int, float] = field(default_factory=dict)
    sampled: list[int] = field(default_factory=list)
    records: dict[str, Any] = field(default_factory=dict)


class Simulation:
    """The coordinator's logic: global state, client states, client sampling and the round loop."""

    def __init__(self, config, shards, initial: GlobalState, executor: Executor,
                 client_states: dict[int, Tensors] | None = None, server=None):
        """
        Args:
            shards: the :class:`~raysim.data.shards.ShardStore`; the loop reads its sizes and ids, a method's
                diagnostics may read cached features (analysis only, never fed back into training).
            initial: the method's initial global state (built by the driver from the run seed), or a
                checkpoint's state together with its ``client_states``.
            server: split learning's encoder server (:class:`raysim.split.EncoderServer` or a handle on the
                ``SplitServer`` actor), built from ``initial``'s ``encoder.*`` tensors, which it then owns.
        """
        self.config = config
        self.method = get_method(config.method)(config)
        self.server = server
        self.state = initial if server is None else GlobalState(initial.params, split_encoder(initial.server)[1])
        self.client_states: dict[int, Tensors] = dict(client_states or {})
        self.executor = executor
        self.shards = shards
        self.seen = shards.seen_clients()
        self.unseen = list(shards.unseen)
        self.client_type = shards.client_domain

    def run_round(self, round: int) -> RoundReport:
        """Train one round (1-based), then evaluate if this round is due."""
        fed = self.config.federation
        start = time.perf_counter()
        sampled = sample_clients(fed.seed, round, self.seen, fed.clients_per_round)
        if self.server is not None:
            self.server.end_round()  # the round's server figures start here (the last evaluation's are not theirs)
        view, instructions = self.method.configure(round, self.state, sampled)
        tasks = [(c, instructions.get(c, {}), self.client_states.get(c)) for c in sampled]
        received = sorted(self.executor.train(round, view, tasks), key=lambda r: r.client_id)
        results, rejected = screen(received, self.state.params)
        if rejected and fed.bad_updates == "fail":
            raise BadUpdateError(f"round {round}: {'; '.join(rejected.values())} (federation.bad_updates=fail)")
        for reason in rejected.values():
            log.warning("round %d: rejected the update of %s", round, reason)
        for result in results:
            if result.state is not None:
                self.client_states[result.client_id] = result.state
        server_metrics = {}
        if self.server is not None:
            server_metrics = self.method.update_server(round, self.server, results)
        if sum(r.num_samples for r in results) > 0:  # a round in which no client had data changes nothing
            self.state = self.method.aggregate(round, self.state, results)
        if self.method.resets_client_states(round):
            self.client_states = {}
        elapsed = time.perf_counter() - start
        samples = sum(r.stats.get("samples", 0) for r in results)
        losses = [r.stats["train_loss"] for r in results if r.stats.get("steps", 0) > 0]
        down, up = self.method.traffic(round, view, instructions, sampled, received)
        metrics = {
            "bytes_down": down,
            "bytes_up": up,
            "round_time_s": elapsed,
            "train_samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
            **server_metrics,
        }
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        if rejected:
            metrics["rejected_updates"] = float(len(rejected))
        report = RoundReport(round, metrics, sampled=sampled)
        evaluated = round % fed.eval_every == 0 or round == fed.rounds
        if evaluated:
            self._evaluate(report)
        extra, report.records = self.method.diagnostics(round, self.state, results, self.shards, evaluated)
        report.metrics.update(extra)
        return report

    def _evaluate(self, report: RoundReport) -> None:
        start = time.perf_counter()
        # client states travel to the workers only for methods that evaluate with them (personalised ones)
        personal = type(self.method).eval_view is not Method.eval_view
        counts = self.executor.evaluate(self.state.params, self.seen + self.unseen, self.client_states if personal else {})
        report.metrics.update(accuracy_metrics(counts, self.seen, self.unseen, self.client_type))
        report.metrics["eval_time_s"] = time.perf_counter() - start
        report.client_acc = client_accuracies(counts)

    def global_state(self) -> GlobalState:
        """The global state; with split learning its ``server`` also holds the encoder (``encoder.*``)."""
        if self.server is None:
            return self.state
        return GlobalState(self.state.params, {**self.state.server, **self.server.state()})

    def snapshot(self) -> tuple[GlobalState, dict[int, Tensors]]:
        """The global state and every client's persistent state: what a checkpoint holds besides the history."""
        return self.global_state(), self.client_states

    def shutdown(self, graceful: bool = True) -> None:
        self.executor.shutdown()
