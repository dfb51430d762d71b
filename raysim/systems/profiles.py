"""Each client's device: compute speed (samples/s), link (bytes/s down and up) and when it is online.

A profile is drawn per client from the run seed (``systems.speed=lognormal:MU,SIGMA``: ln(speed) ~ N(MU, SIGMA);
``uniform:LOW,HIGH``; or a number) or read from a trace file, CSV or parquet, one row per client (docs/systems.md):

    client,speed,downlink,uplink,period_s,online
    0,40.0,2.5e6,1.0e6,86400,0-3600 7200-30000

``online`` lists the ``start-end`` intervals (seconds of virtual time within a period of ``period_s``, repeating) in
which the client can take part; empty: always. An optional ``tier`` column gives each client's capacity tier
(:mod:`raysim.systems.tiers`), or ``systems.tiers=head,last-2,all`` draws one per client. A trace's columns override
the distributions; a client the trace does not list takes the listed rows in turn (client c: the (c mod K)-th of K
rows), as FedScale assigns its traces.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from raysim.base.seeding import Purpose, rng
from raysim.systems.distributions import parse_distribution
from raysim.systems.tiers import ALL, parse_tiers

FIELDS = ("speed", "downlink", "uplink")  # drawn per client; units samples/s, bytes/s, bytes/s
TIER_DRAW = len(FIELDS)  # the key of the tiers' generator, after the fields'


@dataclass(frozen=True)
class Profiles:
    """Every client's device. ``inf`` speed or bandwidth: that part costs no time. Online intervals are flat
    arrays (``owner[i]`` is online in ``[start[i], end[i])`` of its period); a client with none is always online.
    ``tier``: each client's capacity tier (``all``: it trains everything)."""

    speed: np.ndarray
    downlink: np.ndarray
    uplink: np.ndarray
    period: np.ndarray
    owner: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tier: np.ndarray

    @property
    def tiered(self) -> bool:
        """Whether some client trains less than everything."""
        return bool((self.tier != ALL).any())

    @cached_property
    def offline_by_default(self) -> np.ndarray:
        """Per client, whether it has intervals (and so is offline outside them)."""
        return np.bincount(self.owner, minlength=len(self.speed)) > 0

    @cached_property
    def carried_over(self) -> np.ndarray:
        """Per interval, the time an interval ending with the period goes on for in one starting at 0."""
        opening = np.zeros(len(self.speed))
        np.maximum.at(opening, self.owner[self.start == 0], self.end[self.start == 0])
        return np.where(self.end >= self.period[self.owner], opening[self.owner], 0.0)

    def online_left(self, now: float) -> np.ndarray:
        """Per client, how long it stays online from ``now`` (``inf``: always online; 0: offline now). An interval
        opening within :func:`slack` of ``now`` is open: ``now`` may be the clock advanced by :meth:`next_online`."""
        left = np.where(self.offline_by_default, 0.0, np.inf)
        if len(self.owner):
            phase = phase_of(now, self.period[self.owner])
            inside = (self.start <= phase + slack(now)) & (phase < self.end)
            np.maximum.at(left, self.owner[inside], (self.end - phase + self.carried_over)[inside])
        return left

    def next_online(self, now: float, clients: list[int] | np.ndarray | None = None) -> float:
        """How long from ``now`` until the next interval of one of ``clients`` (default: all) opens (``inf`` if none
        ever does): the server waits for a client it could select, not for a held-out one."""
        mine = np.isin(self.owner, clients) if clients is not None else np.ones(len(self.owner), dtype=bool)
        if not mine.any():
            return np.inf
        period = self.period[self.owner[mine]]
        start = self.start[mine]
        phase = phase_of(now, period)
        wait = np.where(start > phase + slack(now), start - phase, period - phase + start)
        return float(wait[wait > 0].min(initial=np.inf))


def phase_of(now: float, period: np.ndarray) -> np.ndarray:
    """Where ``now`` falls in each ``period``: in [0, period), but a phase within :func:`slack` below the period's end
    is the next period's start (a clock advanced to an interval opening at 0 lands there as often as not)."""
    phase = np.mod(now, period)
    return np.where(period - phase <= slack(now), phase - period, phase)


def slack(now: float) -> float:
    """How far below an interval's opening the phase of the clock advanced to it may round (``now + wait`` and the
    modulo each round once): a few units in the last place of ``now``."""
    return 8 * float(np.spacing(max(abs(now), 1.0)))


def draw_profiles(systems, clients: int, seed: int) -> Profiles:
    """The run's profiles: ``systems.trace`` where it has a column, else ``systems.<field>`` drawn from the run seed
    (one generator per field, so one field's setting never changes another's draws), else ``inf``."""
    values = {}
    for index, name in enumerate(FIELDS):
        spec = getattr(systems, name)
        if spec is None:
            values[name] = np.full(clients, np.inf)
        else:
            values[name] = parse_distribution(f"systems.{name}", spec).draw(rng(seed, Purpose.SYSTEMS, index), clients)
    if systems.tiers:
        tiers = np.asarray(parse_tiers(systems.tiers), dtype=object)
        tier = tiers[rng(seed, Purpose.SYSTEMS, TIER_DRAW).integers(len(tiers), size=clients)]
    else:
        tier = np.full(clients, ALL, dtype=object)
    empty = np.zeros(0)
    profiles = Profiles(
        **values, period=np.full(clients, np.inf), owner=empty.astype(np.int64), start=empty, end=empty, tier=tier
    )
    if not systems.trace:
        return profiles
    from raysim.systems.trace_file import read_trace  # pandas: only a run with a trace file pays for it

    return dataclasses.replace(profiles, **read_trace(systems.trace, clients, FIELDS))
