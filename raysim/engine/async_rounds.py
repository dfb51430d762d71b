"""Asynchronous mode's schedule (``federation.mode=async``): ``federation.concurrency`` C clients train at any time,
each from the model current when it downloaded; when one finishes on the virtual clock, its update joins the buffer
and the next client, drawn from the run seed among those online and idle, downloads the current model (a slot left
free for want of one is taken when a client comes online). Every
``federation.buffer`` K accepted updates make a server version (:mod:`raysim.engine.buffered_step`), the unit
``--rounds`` counts (FedBuff: Nguyen et al., AISTATS 2022; FedAsync: Xie et al., 2019).

A dispatched client arrives at ``download + samples / speed + upload`` seconds after its download (the synchronous
clock's arithmetic, :func:`raysim.systems.clock.finish_times`, on its real samples and encoded bytes), never before
its planned local work (rows x epochs at its speed) allows, and fails if its device goes offline first or
``systems.dropout`` draws it. Arrivals are taken in the order of (virtual time, client id).

Each dispatch starts its client's training at once (on the Ray backend, on the least busy worker), so the pool
trains while the server aggregates. An arrival is taken only once no client still training could arrive before it:
a client still training arrives no earlier than its planned work allows, so the server waits for a result only when
that bound says it might come first. Which update lands where depends on the virtual clock alone, never on which
worker was faster, so every backend and pool size gives the same numbers. A client's training is a function of the
model it downloaded, its kept state and its dispatch number's seed; a checkpoint keeps the clients in flight (what
they downloaded, when, and their bounds) and a resumed run trains them again, to the same updates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from raysim.base.errors import BadUpdateError, ConfigError
from raysim.base.seeding import Purpose, rng
from raysim.core.messages import Broadcast, ClientUpdate, Tensors, split_prefixed, unprefixed
from raysim.core.protocol import SendsExtras
from raysim.engine.buffered_step import Arrival
from raysim.engine.screening import screen
from raysim.engine.uplink import own_state
from raysim.ops.staleness import parse_staleness
from raysim.systems.clock import finish_times

PREFIX = "async/"  # the schedule's tensors in a checkpoint's server state
TABLE, TIMES, NEXT = f"{PREFIX}inflight", f"{PREFIX}times", f"{PREFIX}dispatched"
FAILURES_IN_A_ROW = 1000  # dispatches that fail one after another before a run stops: devices that never finish
REJECTED_IN_A_ROW = 100  # updates the server rejects one after another before a run stops: a run that diverged


def split_schedule(server_state: Tensors) -> tuple[Tensors, Tensors]:
    """A checkpoint's server state split into the asynchronous schedule's tensors and the method's."""
    return split_prefixed(server_state, PREFIX)


@dataclass
class Dispatch:
    """One client's download and training: ``version``, the server versions applied when it downloaded; ``earliest``,
    when its planned work could end; ``offline``, when its device goes offline."""

    number: int
    client: int
    version: int
    start: float
    earliest: float
    offline: float
    download: float  # bytes
    fails: bool
    broadcast: Broadcast
    state: Tensors | None  # what the client kept when it downloaded (its error-feedback residual in it)
    model: Tensors | None = None  # the server's model at the download, under a compressed broadcast only
    handle: Any = None
    update: ClientUpdate | None = None
    finish: float | None = None

    @property
    def bound(self) -> float:
        """No arrival (or failure) of this dispatch comes before this time."""
        return min(self.earliest, self.offline)


@dataclass
class Version:
    """What the schedule hands the server for one version: the buffer, and the version's metrics."""

    arrivals: list[Arrival]
    metrics: dict[str, float]
    rejected: list[str]
    """Why each rejected update was (a client may arrive, and be rejected, more than once a version)."""


class AsyncSchedule:
    """The clients in flight and the virtual clock between server versions, for a
    :class:`~raysim.engine.simulation.Simulation`."""

    def __init__(self, simulation, saved: Tensors):
        """``saved``: the schedule's tensors from the checkpoint the run starts from (empty for a new run)."""
        self.sim = simulation
        config = simulation.config
        fed = config.federation
        self.seed, self.dropout = fed.seed, config.systems.dropout
        self.concurrency, self.buffer = fed.concurrent_clients, fed.buffer_size
        self.staleness = parse_staleness(fed.staleness)
        self.profiles = simulation.devices.profiles
        self.planned = simulation.shards.train_sizes() * config.train.local_epochs  # samples of a whole local run
        self.candidates = np.asarray(sorted(simulation.seen), dtype=np.int64)
        self.inflight: list[Dispatch] = []
        self.dispatched = 0
        if saved:
            self._restore(saved)

    def version(self, round: int) -> Version:
        """Run the clock until K updates are accepted: server version ``round`` (1-based)."""
        sim = self.sim
        now = started = sim.sim_time
        buffered, rejected, down, up, dropouts, failed_in_a_row, rejected_in_a_row = [], [], 0.0, 0.0, 0, 0, 0
        extras = sim.method.uplink_extras(sim.state) if isinstance(sim.method, SendsExtras) else None
        while len(buffered) < self.buffer:
            down += self._fill(round, now)
            if not self.inflight:
                wait = self.profiles.next_online(now, self.candidates)
                if not math.isfinite(wait):
                    raise ConfigError(
                        f"server version {round}: no client is online or will be again (systems.trace); give the "
                        "trace intervals that reopen, or fewer --rounds"
                    )
                now += wait
                continue
            arrival = self._next_arrival()
            if len(self.inflight) < self.concurrency:  # a free slot: a client coming online first takes it then
                opens = now + self.profiles.next_online(now, self.candidates)
                if opens < arrival.finish:
                    now = opens
                    continue
            self.inflight.remove(arrival)
            now = arrival.finish
            if arrival.fails:
                dropouts += 1
                failed_in_a_row += 1
                if failed_in_a_row == FAILURES_IN_A_ROW:
                    raise ConfigError(
                        f"server version {round}: {failed_in_a_row} clients in a row went offline or dropped out "
                        "before finishing; lower systems.dropout, speed the devices up or shorten the local work"
                    )
                continue
            failed_in_a_row = 0
            update = arrival.update
            up += update.bytes_up
            previous = sim.clients.get(arrival.client)
            _, why = screen([update], sim.state.params, extras, {arrival.client: previous})
            if why:
                sim.refuse(f"server version {round}", why)
                rejected.extend(why.values())
                if sim.uplink is not None:
                    sim.uplink.residuals.pop(arrival.client, None)
                rejected_in_a_row += 1
                if rejected_in_a_row == REJECTED_IN_A_ROW:  # no version would ever fill its buffer
                    raise BadUpdateError(
                        f"server version {round}: the last {rejected_in_a_row} updates were all rejected, the last "
                        f"of {next(iter(why.values()))}; the run diverged or its clients send malformed updates "
                        "(lower train.lr, say)"
                    )
                continue
            rejected_in_a_row = 0
            sim.keep_state(update, arrival.state)
            staleness = round - 1 - arrival.version
            buffered.append(Arrival(update, arrival.broadcast.params, staleness, arrival.model))
        sim.sim_time = now
        stale = [a.staleness for a in buffered]
        metrics = {
            "bytes_down": down,
            "bytes_up": up,
            "round_sim_s": now - started,
            "sim_time_s": now,
            "dropouts": float(dropouts),
            "staleness_mean": float(np.mean(stale)),
            "staleness_max": float(max(stale)),
            "updates_applied": float(len(buffered)),
        }
        return Version(buffered, metrics, rejected)

    def _fill(self, round: int, now: float) -> float:
        """Dispatch clients until C are in flight or none is online and idle; returns the bytes they download."""
        if len(self.inflight) >= self.concurrency:
            return 0.0
        left = self.profiles.online_left(now)
        busy = np.asarray([d.client for d in self.inflight], dtype=np.int64)
        idle = self.candidates[(left[self.candidates] > 0) & ~np.isin(self.candidates, busy)]
        down = 0.0
        while len(self.inflight) < self.concurrency and len(idle):
            self.dispatched += 1
            pick = int(rng(self.seed, Purpose.DISPATCH, self.dispatched).integers(len(idle)))
            client = int(idle[pick])
            idle = np.delete(idle, pick)
            broadcast = self.sim.method.configure(round, self.sim.state, [client])
            if self.sim.downlink is not None:
                broadcast = self.sim.downlink.broadcast(broadcast, [client])
            dispatch = self._planned(client, round - 1, now, float(left[client]), broadcast)
            if self.sim.downlink is not None and self.buffer == 1:  # FedAsync mixes models (buffered_step)
                dispatch.model = self.sim.state.params
            down += dispatch.download
            self._start(dispatch)
        return down

    def _planned(self, client: int, version: int, now: float, left: float, broadcast: Broadcast) -> Dispatch:
        """A dispatch of ``client`` at ``now``, its timings and its dropout draw."""
        p, download = self.profiles, float(broadcast.bytes_to(client))
        earliest = now + download / p.downlink[client] + self.planned[client] / p.speed[client]
        fails = bool(self.dropout) and rng(self.seed, Purpose.DROPOUT, self.dispatched).random() < self.dropout
        fails = fails or now + left < earliest  # offline before its planned work could end: no need to train it
        state = self.sim.clients.get(client)
        return Dispatch(self.dispatched, client, version, now, earliest, now + left, download, fails, broadcast, state)

    def _start(self, dispatch: Dispatch) -> None:
        """Start the client's training (none for one that fails: it arrives with nothing when its bound says)."""
        sim, client = self.sim, dispatch.client
        if dispatch.fails:
            dispatch.finish = dispatch.bound
        else:
            kept = dispatch.state if sim.uplink is None else own_state(dispatch.state)
            task = (client, dispatch.broadcast.instructions.get(client, {}), kept, 1.0, sim.tier(client))
            dispatch.handle = sim.executor.submit(dispatch.version + 1, dispatch.broadcast, task, dispatch.number)
        self.inflight.append(dispatch)

    def _next_arrival(self) -> Dispatch:
        """The first dispatch to arrive by (time, client): one whose result is known and that no client still training
        could precede; results are waited for, first bound first, until one is."""
        while True:
            known = [d for d in self.inflight if d.finish is not None]
            pending = [d for d in self.inflight if d.finish is None]
            first = min(known, key=lambda d: (d.finish, d.client), default=None)
            waiting = min(pending, key=lambda d: (d.bound, d.client), default=None)
            if waiting is None or (
                first is not None and (first.finish, first.client) < (waiting.bound, waiting.client)
            ):
                return first
            self._collect(waiting)

    def _collect(self, dispatch: Dispatch) -> None:
        """The dispatch's update as the server receives it, and when it arrives (or when it fails)."""
        sim, p, client = self.sim, self.profiles, dispatch.client
        update = sim.executor.result(dispatch.handle)
        if sim.uplink is not None:
            update = sim.uplink.send(dispatch.number, dispatch.broadcast, update, dispatch.state)
        took = finish_times(
            np.array([dispatch.download]),
            np.array([update.metrics.get("samples", 0)], dtype=float),
            np.array([update.bytes_up], dtype=float),
            p.speed[[client]],
            p.downlink[[client]],
            p.uplink[[client]],
        )
        finish = max(dispatch.start + float(took[0]), dispatch.earliest)
        dispatch.update, dispatch.handle = update, None
        dispatch.fails = finish > dispatch.offline
        dispatch.finish = dispatch.offline if dispatch.fails else finish

    def saved(self) -> Tensors:
        """The schedule as tensors for a checkpoint: the clients in flight, what each downloaded (one copy of the
        parameters per server version, and under FedAsync with a compressed broadcast the server's model then) and
        its timings, and the dispatch count."""
        out: Tensors = {
            NEXT: torch.tensor(self.dispatched, dtype=torch.int64),
            TABLE: torch.tensor(  # failing: only a dispatch planned to fail; one that failed in its upload trains
                [[d.number, d.client, d.version, int(d.fails and d.update is None)] for d in self.inflight],
                dtype=torch.int64,  # again on resume, and fails again when its device goes offline
            ).reshape(-1, 4),
            TIMES: torch.tensor(
                [[d.start, d.earliest, d.offline, d.download] for d in self.inflight], dtype=torch.float64
            ).reshape(-1, 4),
        }
        for d in self.inflight:
            out.update({f"{PREFIX}v{d.version}/params/{k}": t for k, t in d.broadcast.params.items()})
            out.update({f"{PREFIX}v{d.version}/model/{k}": t for k, t in (d.model or {}).items()})
            out.update({f"{PREFIX}d{d.number}/extras/{k}": t for k, t in d.broadcast.extras.items()})
            instructions = d.broadcast.instructions.get(d.client, {})
            out.update({f"{PREFIX}d{d.number}/instructions/{k}": t for k, t in instructions.items()})
        return out

    def _restore(self, saved: Tensors) -> None:
        """The clients in flight at the checkpoint, their training started again."""
        self.dispatched = int(saved[NEXT])
        part = partial(unprefixed, saved)

        for (number, client, version, fails), (start, earliest, offline, download) in zip(
            saved[TABLE].tolist(), saved[TIMES].tolist()
        ):
            instructions = part(f"{PREFIX}d{number}/instructions/")
            broadcast = Broadcast(
                part(f"{PREFIX}v{version}/params/"),
                part(f"{PREFIX}d{number}/extras/"),
                {client: instructions} if instructions else {},
            )
            state, fails = self.sim.clients.get(client), bool(fails)
            model = part(f"{PREFIX}v{version}/model/") or None
            self._start(
                Dispatch(number, client, version, start, earliest, offline, download, fails, broadcast, state, model)
            )
