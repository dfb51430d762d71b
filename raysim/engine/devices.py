"""The virtual clock in the round loop: who is online and selected, who fails mid-round, who misses the deadline,
and what a round costs in simulated time (docs/systems.md; the arithmetic is :mod:`raysim.systems.clock`).

Every decision is a function of the run seed, the round and the clock, and the clock is the sum of earlier rounds'
simulated durations (``sim_time_s`` in the history), so a resumed run and every backend draw the same.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from raysim.base.seeding import Purpose, rng, sample_clients
from raysim.core.messages import Broadcast, ClientUpdate
from raysim.systems.clock import finish_times, settle, work_by_deadline
from raysim.systems.profiles import Profiles

Retrain = Callable[[list[tuple[int, float]]], list[ClientUpdate]]  # (client, work share) -> their updates


class Devices:
    """The clients' devices and the round's systems decisions."""

    def __init__(self, config, profiles: Profiles):
        self.fed, self.systems = config.federation, config.systems
        self.profiles = profiles

    def select(self, round: int, now: float, seen: list[int]) -> tuple[list[int], float]:
        """The round's clients among those online at ``now`` (``clients_selected`` of them, or all online), and the
        seconds the server waits for a client to come online when none is."""
        left = self.profiles.online_left(now)
        online = [c for c in seen if left[c] > 0] if len(self.profiles.owner) else seen
        if not online:
            return [], self.profiles.next_online(now, seen)
        return sample_clients(self.fed.seed, round, online, min(self.fed.clients_selected, len(online))), 0.0

    def failing(self, round: int, selected: list[int]) -> set[int]:
        """The selected clients that fail mid-round (``systems.dropout``), drawn from the run seed."""
        if not self.systems.dropout or not selected:
            return set()
        draws = rng(self.fed.seed, Purpose.DROPOUT, round).random(len(selected))
        return {c for c, u in zip(selected, draws) if u < self.systems.dropout}

    def settle(
        self,
        now: float,
        broadcast: Broadcast,
        received: list[ClientUpdate],
        failed: int,
        retrain: Retrain,
        protocol: tuple[float, float] = (0.0, 0.0),
    ) -> tuple[list[ClientUpdate], dict[str, float], list[ClientUpdate]]:
        """The updates the round keeps, its systems metrics, and the updates that reached the server (the kept, the
        over-selected and the late: not those of a device that went offline first, nor a cut straggler's that holds
        no work); a straggler under ``partial`` trains again, cut to the work it gets through by the deadline
        (``retrain``). ``protocol``: bytes (down, up) every client's messages carry besides the broadcast and its
        update (secure aggregation's key agreement)."""
        fed, p = self.fed, self.profiles
        ids = np.array([u.client_id for u in received], dtype=np.int64)
        down = np.array([broadcast.bytes_to(c) + protocol[0] for c in ids], dtype=float)
        up = np.array([u.bytes_up + protocol[1] for u in received], dtype=float)
        samples = np.array([u.metrics.get("samples", 0) for u in received], dtype=float)
        finish = finish_times(down, samples, up, p.speed[ids], p.downlink[ids], p.uplink[ids])
        left = p.online_left(now)[ids]
        overdue = finish > fed.deadline_s if fed.deadline_s > 0 else np.zeros(len(ids), dtype=bool)
        online = finish <= left  # a client whose device goes offline before its update arrives fails mid-round
        updates, done = {u.client_id: u for u in received}, set()
        if fed.stragglers == "partial" and overdue.any():
            communication = down / p.downlink[ids] + up / p.uplink[ids]
            work = work_by_deadline(fed.deadline_s, communication, samples, p.speed[ids])
            could = overdue & (work > 0) & (communication <= left)  # a cut update might arrive while it is online
            redone = retrain([(int(c), float(w)) for c, w, cut in zip(ids, work, could) if cut])
            for update in redone:
                i = int(np.flatnonzero(ids == update.client_id)[0])
                updates[update.client_id] = update
                finish[i] = communication[i] + update.metrics.get("samples", 0) / p.speed[ids[i]]
            done = {u.client_id for u in redone if u.metrics.get("steps", 0) > 0}
            # a straggler is online while its cut update arrives (one with no work: at the deadline, sending nothing)
            online = np.where(overdue, np.minimum(finish, fed.deadline_s) <= left, online)
        late = online & overdue
        if fed.stragglers == "drop":
            usable = online & ~late
        elif fed.stragglers == "partial":
            usable = online & (~late | np.isin(ids, list(done)))
        else:  # wait
            usable = online
        dropouts = failed + int((~online).sum())
        lost_until = float(left[~online].max()) if (~online).any() else 0.0  # when the last one went offline
        outcome = settle(
            ids[online].tolist(),
            finish[online],
            usable[online],
            fed.clients_per_round,
            fed.deadline_s,
            dropouts,
            lost_until,
        )
        metrics = {
            "round_sim_s": outcome.duration,
            "stragglers": float(late.sum()),
            "dropouts": float(dropouts),
            "participation_rate": len(outcome.kept) / fed.clients_per_round,
        }
        sent_nothing = set(ids[overdue].tolist()) - done if fed.stragglers == "partial" else set()
        reached = [updates[int(c)] for c in ids[online] if int(c) not in sent_nothing]
        return [updates[c] for c in outcome.kept], metrics, reached
