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

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from raysim.core.errors import ConfigError
from raysim.core.seeding import Purpose, rng
from raysim.systems import traces
from raysim.systems.distributions import parse_distribution
from raysim.systems.tiers import ALL, check_tier, parse_tiers

FIELDS = ("speed", "downlink", "uplink")  # drawn per client; units samples/s, bytes/s, bytes/s
TRACE_COLUMNS = ("client", *FIELDS, "period_s", "online", "tier")
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
        """Per client, how long it stays online from ``now`` (``inf``: always online; 0: offline now)."""
        left = np.where(self.offline_by_default, 0.0, np.inf)
        if len(self.owner):
            phase = np.mod(now, self.period[self.owner])
            inside = (self.start <= phase) & (phase < self.end)
            np.maximum.at(left, self.owner[inside], (self.end - phase + self.carried_over)[inside])
        return left

    def next_online(self, now: float) -> float:
        """How long from ``now`` until some offline client's next interval opens (``inf`` if none ever does)."""
        if not len(self.owner):
            return np.inf
        period = self.period[self.owner]
        phase = np.mod(now, period)
        wait = np.where(self.start > phase, self.start - phase, period - phase + self.start)
        return float(wait[wait > 0].min(initial=np.inf))


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
    return read_trace(systems.trace, profiles) if systems.trace else profiles


def read_trace(path: str, base: Profiles) -> Profiles:
    """``base`` with the trace's columns in place of its own (a one-line ConfigError if the file is missing, has
    no or unknown columns, bad values, or names a client outside the run)."""
    clients = len(base.speed)
    table = _read_table(path)
    unknown = sorted(set(table.columns) - set(TRACE_COLUMNS))
    if "client" not in table.columns or unknown:
        raise ConfigError(
            f"trace {path}: {'unknown columns ' + ', '.join(unknown) if unknown else 'no client column'}; "
            f"valid columns: {', '.join(TRACE_COLUMNS)} (docs/systems.md)"
        )
    ids = _integers(path, table["client"], "client")
    if len(ids) == 0:
        raise ConfigError(f"trace {path} has no rows")
    if len(set(ids.tolist())) != len(ids) or ids.min() < 0 or ids.max() >= clients:
        bad = ids[(ids < 0) | (ids >= clients)]
        what = f"references client {bad[0]}" if len(bad) else "lists a client twice"
        raise ConfigError(f"trace {path} {what}; the run has {clients} clients (0..{clients - 1}), one row each")
    order = np.argsort(ids)
    ids, table = ids[order], table.iloc[order].reset_index(drop=True)
    row_of = np.arange(clients) % len(ids)
    row_of[ids] = np.arange(len(ids))  # a listed client takes its own row; the others take the rows in turn
    values = {name: getattr(base, name) for name in FIELDS}
    for name in FIELDS:
        if name in table.columns:
            column = _positive(path, table[name], name)
            values[name] = column[row_of]
    period = _positive(path, table["period_s"], "period_s")[row_of] if "period_s" in table.columns else base.period
    owner, start, end = base.owner, base.start, base.end
    if "online" in table.columns:
        owner, start, end = _intervals(path, table["online"], row_of, period)
    tier = base.tier
    if "tier" in table.columns:
        column = table["tier"].astype(str).str.strip().replace("", ALL)
        tier = np.asarray([check_tier(t, f"trace {path}: column tier") for t in column], dtype=object)[row_of]
    return Profiles(**values, period=period, owner=owner, start=start, end=end, tier=tier)


def _read_table(path: str) -> pd.DataFrame:
    file = traces.resolve(path)
    try:
        if file.suffix == ".parquet":
            return pd.read_parquet(file)
        return pd.read_csv(file, dtype={"online": str, "tier": str}, keep_default_na=False)
    except Exception as error:  # pandas and pyarrow raise many types; the user needs one line
        raise ConfigError(f"trace {path} could not be read: {str(error).splitlines()[0]}") from None


def _integers(path: str, column: pd.Series, name: str) -> np.ndarray:
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
        raise ConfigError(f"trace {path}: column {name} must hold whole numbers")
    return values.astype(np.int64)


def _positive(path: str, column: pd.Series, name: str) -> np.ndarray:
    values = pd.to_numeric(column.replace("", "inf"), errors="coerce").to_numpy(dtype=float)
    if np.isnan(values).any() or not (values > 0).all():
        raise ConfigError(f"trace {path}: column {name} must hold positive numbers (empty: unlimited)")
    return values


def _intervals(path: str, column: pd.Series, row_of: np.ndarray, period: np.ndarray):
    """Flat (owner, start, end) arrays from each row's ``'a-b c-d'`` text, for every client of the run."""
    per_row = []
    for text in column.fillna("").astype(str):
        spans = []
        for part in text.split():
            a, sep, b = part.partition("-")
            try:
                span = (float(a), float(b))
            except ValueError:
                span = None
            if not sep or span is None or not 0 <= span[0] < span[1]:
                raise ConfigError(f"trace {path}: online interval {part!r} must look like START-END, 0 <= START < END")
            spans.append(span)
        per_row.append(spans)
    owner, start, end = [], [], []
    for client, row in enumerate(row_of):
        for a, b in per_row[row]:
            if b > period[client]:
                raise ConfigError(f"trace {path}: client {client}'s online interval {a:g}-{b:g} ends after period_s")
            owner.append(client)
            start.append(a)
            end.append(b)
    return np.asarray(owner, dtype=np.int64), np.asarray(start, dtype=float), np.asarray(end, dtype=float)
