"""The round loop, written once: sample -> configure -> client updates -> screen -> aggregate -> evaluate.

:class:`Simulation` owns the global state, the clients' persistent state and the run's history, and hands client
work to an executor (in-process, or a pool of Ray workers). It runs in the driver for the sequential backend and
inside the ``Coordinator`` actor for the Ray backend: the same code, hence the same
numbers. Callbacks that need the state (checkpoints, the method's diagnostics) run here, where it lives, so a
round costs the driver one call that returns metrics.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path

import numpy as np
import ray
import torch
from safetensors.torch import save_file

from raysim.base.errors import BadUpdateError
from raysim.base.seeding import evaluated_clients, sample_clients
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState, Tensors
from raysim.core.protocol import Diagnostics, Personalised, SendsExtras, SplitLearning, split_encoder
from raysim.core.registry import get_method
from raysim.engine.async_rounds import AsyncSchedule, split_schedule
from raysim.engine.buffered_step import buffered_step
from raysim.engine.callbacks import Callback, Checkpointing, RoundReport
from raysim.engine.client_states import ClientStates
from raysim.engine.devices import Devices
from raysim.engine.downlink import Downlink, split_public
from raysim.engine.executors import start_executor
from raysim.engine.ray_session import Pool
from raysim.engine.screening import screen
from raysim.engine.uplink import OwnStates, Uplink, own_state
from raysim.ops.metrics import accuracy_metrics, client_accuracies, generic_accuracy
from raysim.privacy import calibration, secure_sum
from raysim.privacy.cohort_view import CohortView
from raysim.systems.profiles import draw_profiles
from raysim.systems.tiers import ALL
from raysim.tracking.checkpoint import Checkpoint, detached, flattened
from raysim.tracking.participation import save_participation

log = logging.getLogger("raysim")


class Simulation:
    """The coordinator: global state, client states, client sampling, the round loop, and the state's callbacks."""

    def __init__(
        self,
        config,
        shards,
        start: Checkpoint,
        pool: Pool | None = None,
        callbacks: list[Callback] = (),
        server=None,
    ):
        """
        Args:
            shards: the :class:`~raysim.data.shards.ShardStore`, or ``[ObjectRef]`` of it for the Ray backend (boxed,
                so this keeps the reference the workers get each call).
            start: where the run stands: round 0 for a new run, a checkpoint's round to resume or recover.
            pool: the Ray worker pool and its reservation; None runs every client in this process.
            callbacks: run around each round, here, with this simulation (checkpoints, diagnostics).
            server: split learning's server, already started (:func:`~raysim.engine.executors.start_server`; the
                coordinator's, from the run's set-up); None starts one here when the method is split.
        """
        # the server's own math (aggregation, a hypernetwork's step, diagnostics) sums with the clients' thread count
        # on both backends: a Ray coordinator (num_cpus=0) starts with one thread, the sequential driver with the
        # clients' (set by its in-process runtime), and another count changes the float sums
        torch.set_num_threads(config.resources.torch_threads)
        self.config = config
        self.method = get_method(config.method).cls(config)
        shards_ref = shards[0] if isinstance(shards, list) else None
        self.shards = ray.get(shards_ref) if shards_ref is not None else shards
        encoder, server_state = split_encoder(start.state.server)
        schedule, server_state = split_schedule(server_state)
        public, server_state = split_public(server_state)
        self.state = GlobalState(start.state.params, server_state)
        self.executor = start_executor(config, self.shards, shards_ref, pool, encoder, server)
        self.updates: list[ClientUpdate] = []  # the last round's screened updates, for the callbacks here
        self.clients = ClientStates(start.client_states)
        self.run_id, self.round = start.run_id, start.round
        self.history, self.client_acc, self.records = list(start.history), dict(start.client_acc), list(start.records)
        # client -> the rounds whose step used its update (None: resumed from a checkpoint that did not count them)
        self.contributions = None if start.contributions is None else dict(start.contributions)
        self.seen = self.shards.seen_clients()
        self.unseen = list(self.shards.unseen)
        self.eval_seen, self.eval_unseen = evaluated_clients(config.federation, self.seen, self.unseen)
        clients, systems = self.shards.num_clients, config.systems
        profiles = draw_profiles(systems, clients, config.federation.seed) if config.clocked or systems.tiers else None
        self.devices = Devices(config, profiles) if config.clocked else None
        self.tiers = profiles.tier if profiles is not None and profiles.tiered else None  # capacity tiers, per client
        self.sim_time = self.history[-1].get("sim_time_s", 0.0) if self.history else 0.0  # the virtual clock
        privacy = config.privacy
        self.units = calibration.record_units(config, self.shards)  # record-level DP's accounted clients' sizes
        self.view = None  # what the server's step sees under DP or secure aggregation (raysim.privacy.cohort_view)
        if privacy.private or privacy.secure_aggregation:
            self.view = CohortView(config, self.method)
        compression = config.compression
        # compressed updates (raysim.engine.uplink)
        self.uplink = Uplink(config, self.method) if compression.uplink != "none" else None
        clients = self.shards.num_clients
        # compressed broadcasts: the public model clients train from (raysim.engine.downlink)
        self.downlink = Downlink(config, self.state.params, clients, public) if compression.downlink != "none" else None
        # user-level DP's clip C: adaptive clipping's continues from the history
        self.clip = (
            self.history[-1].get("privacy_next_clip", privacy.initial_clip) if self.history else privacy.initial_clip
        )
        # asynchronous mode's clients in flight (raysim.engine.async_rounds); those of a checkpoint train again
        self.schedule = AsyncSchedule(self, schedule) if config.federation.asynchronous else None
        self.callbacks = list(callbacks)
        for callback in self.callbacks:
            callback.on_start(self)

    @property
    def server(self):
        """Split learning's server (the service or a handle on it), or None."""
        return self.executor.server

    def run_round(self, round: int) -> RoundReport:
        """Train one round (1-based; in asynchronous mode one server version), evaluate if due, run the callbacks;
        the report is all the driver receives."""
        fed = self.config.federation
        start = time.perf_counter()
        step = self._sync_round if self.schedule is None else self._async_version
        updates, sampled, rejected, metrics = step(round)
        elapsed = time.perf_counter() - start
        if self.contributions is not None:
            for update in updates:
                self.contributions[update.client_id] = self.contributions.get(update.client_id, 0) + 1
        samples = sum(u.metrics.get("samples", 0) for u in updates)
        losses = [u.metrics["train_loss"] for u in updates if u.metrics.get("steps", 0) > 0]
        metrics = {
            "bytes_down": metrics.pop("bytes_down"),
            "bytes_up": metrics.pop("bytes_up"),
            "round_time_s": elapsed,
            "train_samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
            **metrics,
        }
        evaluated = fed.evaluates(round)
        privacy = self.config.privacy
        if privacy.private and (privacy.accountant == "rdp" or evaluated):  # PLD composes anew: ~1 s a call
            metrics["privacy_epsilon"] = calibration.spent(self.config, round, self.units)
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        if rejected:
            metrics["rejected_updates"] = float(len(rejected))
        if self.tiers is not None:
            metrics["tiered_updates"] = float(sum(1 for u in updates if u.trained))
        report = RoundReport(round, metrics, sampled=sampled, evaluated=evaluated)
        if report.evaluated:
            self._evaluate(report)
        self.updates = updates
        for callback in self.callbacks:
            callback.on_round(round, report)
        self.updates = []
        self.round = round
        self.history.append({"round": round, **report.metrics})
        self.client_acc = report.client_acc or self.client_acc
        if report.records:
            self.records.append(report.records)
        for callback in self.callbacks:
            callback.after_round(round, report)
        return report

    def _sync_round(self, round: int) -> tuple[list[ClientUpdate], list[int], list[str], dict[str, float]]:
        """A synchronous round up to the server's step: the updates it used, the sampled clients, why each rejected
        update was, and the round's traffic, systems, split-learning and privacy metrics."""
        fed = self.config.federation
        if self.devices is None:
            poisson = fed.sampling == "poisson"
            sampled = sample_clients(fed.seed, round, self.seen, fed.clients_per_round, poisson)
            waited, failed = 0.0, set()
        else:
            sampled, waited = self.devices.select(round, self.sim_time, self.seen)
            failed = self.devices.failing(round, sampled)
        if self.server is not None:
            self.server.end_round()  # the round's server figures start here (the last evaluation's are not theirs)
        broadcast = self.method.configure(round, self.state, sampled)
        if self.downlink is not None:
            broadcast = self.downlink.broadcast(broadcast, sampled)
        received = self._train(round, broadcast, [(c, 1.0) for c in sampled if c not in failed])
        arrived, reached, systems = received, received, {}
        protocol = secure_sum.overhead(len(sampled)) if self.config.privacy.secure_aggregation else (0.0, 0.0)
        if self.devices is not None:  # the virtual clock: who made it, and how long the round took
            retrain = partial(self._train, round, broadcast)
            now = self.sim_time + waited
            arrived, systems, reached = self.devices.settle(now, broadcast, received, len(failed), retrain, protocol)
            systems["round_sim_s"] += waited
            self.sim_time += systems["round_sim_s"]
            systems["sim_time_s"] = self.sim_time
        extras = self.method.uplink_extras(self.state) if isinstance(self.method, SendsExtras) else None
        updates, rejected = screen(arrived, self.state.params, extras, {c: self.clients.get(c) for c in sampled})
        self.refuse(f"round {round}", rejected)
        for update in updates:
            self.keep_state(update, self.clients.get(update.client_id))
        if self.uplink is not None:
            self.uplink.residuals.clear()  # a client whose update was not used keeps its previous residual
        metrics = {}
        split = isinstance(self.method, SplitLearning)
        if split:
            metrics.update(self.method.update_server(round, self.server, updates))
        stepped, private = updates, {}
        if self.downlink is not None:  # each client's delta, from what it received, onto the server's model
            stepped = [self.downlink.moved(self.state.params, u) for u in updates]
        if self.view is not None:
            stepped, private = self.view.view(round, self.state, stepped, self.clip)
            self.clip = private.get("privacy_next_clip", self.clip)
        if sum(u.num_samples for u in stepped) > 0:  # a round in which no client had data changes nothing
            self.state = self.method.aggregate(round, self.state, stepped)
        if self.downlink is not None:
            self.downlink.advance(round, self.state.params)
        if split and self.method.resets_client_states(round):
            self.clients.clear()
        if split:
            down, up = self.method.traffic(round, broadcast, sampled, received)
        else:
            # up: the updates that reached the server (on the clock, not those of a device that went offline first)
            down, up = broadcast.bytes_down(sampled), float(sum(u.bytes_up for u in reached))
            down, up = down + protocol[0] * len(sampled), up + protocol[1] * len(reached)
        return (
            updates,
            sampled,
            list(rejected.values()),
            {"bytes_down": down, "bytes_up": up, **systems, **metrics, **private},
        )

    def _async_version(self, round: int) -> tuple[list[ClientUpdate], list[int], list[str], dict[str, float]]:
        """Asynchronous mode's server version ``round``: the schedule runs the clock until the buffer is full
        (:mod:`raysim.engine.async_rounds`), then the buffered step (:mod:`raysim.engine.buffered_step`)."""
        version = self.schedule.version(round)
        updates = [a.update for a in version.arrivals]
        if sum(u.num_samples for u in updates) > 0:  # a version in which no client had data changes nothing
            fed, staleness = self.config.federation, self.schedule.staleness
            self.state = buffered_step(self.method, round, self.state, version.arrivals, fed, staleness)
        if self.downlink is not None:
            self.downlink.advance(round, self.state.params)
        return updates, sorted(u.client_id for u in updates), version.rejected, version.metrics

    def _train(self, round: int, broadcast: Broadcast, work: list[tuple[int, float]]) -> list[ClientUpdate]:
        """The clients' updates, by client id, as the server receives them (decoded, under compression); each
        ``(client, share of its work)`` trains from its kept state."""
        states = {c: self.clients.get(c) for c, _ in work}  # read once: the uplink needs the residual in it
        kept = states.get if self.uplink is None else lambda c: own_state(states[c])
        tasks = [(c, broadcast.instructions.get(c, {}), kept(c), share, self.tier(c)) for c, share in work]
        updates = sorted(self.executor.train(round, broadcast, tasks), key=lambda u: u.client_id)
        if self.view is not None:
            updates = [self.view.as_sent(u) for u in updates]
        if self.uplink is not None:
            updates = [self.uplink.send(round, broadcast, u, states[u.client_id]) for u in updates]
        return updates

    def tier(self, client: int) -> str:
        """The client's capacity tier (docs/systems.md): ``all`` unless ``systems.tiers`` or a trace gives one."""
        return str(self.tiers[client]) if self.tiers is not None else ALL

    def refuse(self, where: str, rejected: dict[int, str]) -> None:
        """The screening's ``rejected`` updates (why, per client) of round or server version ``where``: each logged as
        a warning, or the run stopped under ``federation.bad_updates=fail``."""
        if rejected and self.config.federation.bad_updates == "fail":
            raise BadUpdateError(f"{where}: {'; '.join(rejected.values())} (federation.bad_updates=fail)")
        for reason in rejected.values():
            log.warning("%s: rejected the update of %s", where, reason)

    def keep_state(self, update: ClientUpdate, kept_before: Tensors | None) -> None:
        """A used update's client state kept for its next round; under a compressed uplink with error feedback's new
        residual, from what the client kept when it trained (``kept_before``)."""
        state = update.state
        if self.uplink is not None:
            state = self.uplink.state_to_keep(update.client_id, state, kept_before)
        if state is not None:
            self.clients.put(update.client_id, state)

    def _evaluate(self, report: RoundReport) -> None:
        start = time.perf_counter()
        # client states travel to the workers only for methods that evaluate with them (personalised ones)
        states, evaluated = {}, self.eval_seen + self.eval_unseen
        if isinstance(self.method, Personalised):
            kept = OwnStates(self.clients) if self.uplink is not None else self.clients  # less error feedback's
            states = self.method.evaluated_states(self.state, evaluated, kept)
        counts = self.executor.evaluate(self.state.params, evaluated, states)
        report.metrics.update(accuracy_metrics(counts, self.eval_seen, self.eval_unseen, self.shards.client_domain))
        if isinstance(self.method, Personalised):  # the global model too, on the same rows (as held-out clients)
            generic = self.executor.evaluate(self.state.params, self.eval_seen, {})
            report.metrics["generic_acc"] = generic_accuracy(generic, self.eval_seen)
        report.metrics["eval_time_s"] = time.perf_counter() - start
        report.client_acc = client_accuracies(counts)

    def global_state(self) -> GlobalState:
        """The global state; with split learning its ``server`` also holds the server's blocks (``encoder.*``)."""
        if self.server is None:
            return self.state
        return GlobalState(self.state.params, {**self.state.server, **self.server.state()})

    def checkpoint_state(self) -> GlobalState:
        """What a checkpoint keeps of the server: :meth:`global_state`, in asynchronous mode the clients in flight
        (:meth:`~raysim.engine.async_rounds.AsyncSchedule.saved`), under compression.downlink the public model
        (:meth:`~raysim.engine.downlink.Downlink.saved`)."""
        state = self.global_state()
        kept = [part.saved() for part in (self.schedule, self.downlink) if part is not None]
        return GlobalState(state.params, {**state.server, **{k: v for part in kept for k, v in part.items()}})

    def worker_resources(self) -> list[dict]:
        """What Ray gave each worker of the pool (node and resources); [] when the clients run in this process."""
        return self.executor.resources()

    def checkpoint(self) -> str | None:
        """Write a checkpoint of the current round now (the driver asks when the user stops the run early)."""
        writers = [c for c in self.callbacks if isinstance(c, Checkpointing)]
        return writers[0].write_now() if writers else None

    def results(self, folder: str) -> tuple[dict[str, float], list[str]]:
        """The run's final files, written into ``folder`` where the state lives (the driver logs them): the global
        state as ``global_state.safetensors``, which clients the server heard as ``participation.safetensors``
        (:func:`save_participation`) and the method's diagnostic figures; and the method's run-level metrics from its
        records (:class:`~raysim.core.protocol.Diagnostics`)."""
        state, folder = self.global_state(), Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = detached(flattened(state))
        save_file(written, str(folder / "global_state.safetensors"), metadata={"method": self.config.method})
        files, metrics = [folder / "global_state.safetensors"], {}
        if self.contributions is not None:
            files.append(save_participation(self.contributions, folder))
        if isinstance(self.method, Diagnostics):
            files += self.method.artifacts(self.records, folder)
            metrics = self.method.run_metrics(self.records)
        return metrics, [str(path) for path in files]

    def shutdown(self) -> None:
        for callback in self.callbacks:
            callback.on_end()
        self.executor.shutdown()
