"""Round callbacks (pfl-research's pattern): everything that happens around a round besides the round itself.

Two places run them. Where the state lives (the :class:`~raysim.engine.simulation.Simulation`, inside the
coordinator on Ray): :class:`MethodDiagnostics`, :class:`CommunicationTotals` and :class:`Checkpointing`, so neither
the state, the clients' states nor the history travel to the driver. In the driver: MLflow logging, the progress
bar, Ctrl-C and (in a sweep) Tune reporting, which only need the round's report (:class:`RoundReport`, which
crosses to a Ray run's driver every round: this module imports no torch).
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raysim.base.stop_signals import raise_terminated, takes_sigterm
from raysim.tracking import checkpoint as ckpt

log = logging.getLogger("raysim")


@dataclass
class RoundReport:
    """One round's metrics (MLflow keys), on evaluated rounds every client's accuracy, the method's diagnostic
    records, and where this round's checkpoint was written (None if none was)."""

    round: int
    metrics: dict[str, float]
    client_acc: dict[int, float] = field(default_factory=dict)
    sampled: list[int] = field(default_factory=list)
    records: dict[str, Any] = field(default_factory=dict)
    evaluated: bool = False
    checkpoint: str | None = None


class Callback:
    """Hooks around the rounds; every one is optional."""

    def on_start(self, host) -> None:
        """Before the first round; ``host`` is the Simulation (state-side callbacks) or the driver's run."""

    def on_round(self, round: int, report) -> None:
        """The round ran; add metrics or records to its report (before the round is recorded)."""

    def after_round(self, round: int, report) -> bool:
        """The round is recorded; True asks the run to stop after it."""
        return False

    @property
    def stopping(self) -> bool:
        """Whether this callback already asked the run to stop after the round in flight (a round lost meanwhile is
        then abandoned rather than run again)."""
        return False

    def on_end(self) -> None:
        """After the last round, or when the run stops early."""


class MethodDiagnostics(Callback):
    """The method's own metrics and records (:class:`~raysim.core.protocol.Diagnostics`), computed where the state
    and the shards are."""

    def on_start(self, simulation) -> None:
        self.simulation = simulation

    def on_round(self, round, report) -> None:
        from raysim.core.protocol import Diagnostics  # torch: where the state lives, not in a Ray run's driver

        sim = self.simulation
        if isinstance(sim.method, Diagnostics):
            metrics, report.records = sim.method.diagnostics(
                round, sim.state, sim.updates, sim.shards, report.evaluated
            )
            report.metrics.update(metrics)


class CommunicationTotals(Callback):
    """``bytes_up_total`` and ``bytes_down_total``: the bytes sent so far, logged every round (what accuracy is
    plotted against). Started from the simulation's history, so a resumed or replayed run continues its totals."""

    KEYS = ("bytes_up", "bytes_down")

    def on_start(self, simulation) -> None:
        self.totals = {key: sum(h.get(key, 0.0) for h in simulation.history) for key in self.KEYS}

    def on_round(self, round, report) -> None:
        for key in self.KEYS:
            if key in report.metrics:
                self.totals[key] += report.metrics[key]
                report.metrics[f"{key}_total"] = self.totals[key]


class Checkpointing(Callback):
    """Writes a checkpoint every ``checkpoint.every`` rounds and after the last, where the state lives; each holds
    the global state and, as a file of its own, only the client states changed since the previous checkpoint."""

    def __init__(self, run_folder: Path, tracking_uri: str, client_files: dict[int, str]):
        """``client_files``: where each client's state is, as the checkpoint the run starts from records it."""
        self.run_folder, self.tracking_uri, self.client_files = Path(run_folder), tracking_uri, dict(client_files)

    def on_start(self, simulation) -> None:
        self.simulation = simulation
        self.written_round = None

    def after_round(self, round, report) -> bool:
        config = self.simulation.config
        every, rounds = config.checkpoint.every, config.federation.rounds
        if (every and round % every == 0) or round == rounds:
            report.checkpoint = self.write_now()
        return False

    def write_now(self) -> str:
        """The checkpoint of the simulation's current round (written once per round)."""
        sim = self.simulation
        if self.written_round == sim.round:
            return str(ckpt.round_folder(self.run_folder, sim.round))
        cleared, changed = sim.clients.take_changes()
        point = ckpt.Checkpoint(
            sim.run_id,
            sim.round,
            sim.config.to_dict(),
            sim.checkpoint_state(),
            changed,
            self.tracking_uri,
            list(sim.history),
            dict(sim.client_acc),
            list(sim.records),
            contributions=None if sim.contributions is None else dict(sim.contributions),
        )
        written = ckpt.save(self.run_folder, point, {} if cleared else self.client_files)
        self.client_files, self.written_round = point.client_files, sim.round
        return str(written)


class StopOnCtrlC(Callback):
    """While the rounds run, the first Ctrl-C asks the run to stop after the current round (with a checkpoint); the
    second stops at once. So does SIGTERM where the process takes it (``raysim run``:
    :func:`raysim.base.stop_signals.take_sigterm`); ``signum`` is the signal that asked, for the exit code. Only
    the main thread can own signal handlers; elsewhere (a Tune trial) both keep their usual meaning."""

    def __init__(self, notify):
        self.signum, self._notify, self._previous = None, notify, {}

    def on_start(self, host) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM) if takes_sigterm() else (signal.SIGINT,):
            self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, frame):
        self.signum = signum
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the second Ctrl-C raises KeyboardInterrupt
        if signal.SIGTERM in self._previous:
            signal.signal(signal.SIGTERM, raise_terminated)  # and a second SIGTERM, Terminated
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        self._notify(f"{name}: finishing this round, then writing a checkpoint ({name} again to stop at once)")

    def after_round(self, round, report) -> bool:
        return self.stopping

    @property
    def stopping(self) -> bool:
        return self.signum is not None

    def on_end(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


class MLflowLogger(Callback):
    """Each round's metrics to the run's MLflow store, from the round after ``logged_through``: a resumed run's store
    may hold rounds past its checkpoint (its process killed after it logged them), which the resume replays to the
    same numbers."""

    def __init__(self, tracker, logged_through: int = 0):
        self.tracker, self.logged_through = tracker, logged_through

    def after_round(self, round, report) -> bool:
        if round > self.logged_through:
            self.tracker.log_metrics(report.metrics, step=round)
        return False


class PoolPlacementLogger(Callback):
    """Where the run's Ray workers are, recorded before the first round: tags ``raysim.pool.nodes`` (how many nodes
    the pool spans) and ``raysim.pool.node_ids`` (those nodes, comma-separated), and ``pool.json`` with each worker's
    node id, node address and reserved resources. A resumed run records its own pool over the earlier one's. Nothing
    is recorded for the sequential backend (the clients run in the driver)."""

    def __init__(self, tracker):
        self.tracker = tracker

    def on_start(self, host) -> None:
        workers = host.worker_resources()
        if not workers:
            return
        nodes = sorted({worker["node_id"] for worker in workers})
        self.tracker.set_tags({"raysim.pool.nodes": str(len(nodes)), "raysim.pool.node_ids": ",".join(nodes)})
        self.tracker.log_json([{"worker": i, **worker} for i, worker in enumerate(workers)], "pool.json")


class ProgressBar(Callback):
    """The per-round progress bar with the key metrics."""

    def __init__(self, progress):
        self.progress = progress

    def after_round(self, round, report) -> bool:
        self.progress.advance(round, report.metrics)
        return False
