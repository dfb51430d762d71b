"""A trace file's columns, which take the place of drawn profiles (CSV or parquet, one row per client; the format:
:mod:`raysim.systems.profiles` and docs/systems.md). Its own module because it needs pandas, which a run without a
trace does not import."""

from __future__ import annotations

import numpy as np
import pandas as pd

from raysim.base.errors import ConfigError
from raysim.systems import traces
from raysim.systems.tiers import ALL, check_tier


def read_trace(path: str, clients: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The profile fields the trace has a column for, per client of the run (``fields``, ``period``, ``owner``,
    ``start``, ``end``, ``tier``): a one-line ConfigError if the file is missing, has no or unknown columns, bad
    values, or names a client outside the run."""
    table = _read_table(path)
    columns = ("client", *fields, "period_s", "online", "tier")
    unknown = sorted(set(table.columns) - set(columns))
    if "client" not in table.columns or unknown:
        raise ConfigError(
            f"trace {path}: {'unknown columns ' + ', '.join(unknown) if unknown else 'no client column'}; "
            f"valid columns: {', '.join(columns)} (docs/systems.md)"
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
    found = {name: _positive(path, table[name], name)[row_of] for name in fields if name in table.columns}
    period = np.full(clients, np.inf)
    if "period_s" in table.columns:
        found["period"] = period = _positive(path, table["period_s"], "period_s")[row_of]
    if "online" in table.columns:
        found["owner"], found["start"], found["end"] = _intervals(path, table["online"], row_of, period)
    if "tier" in table.columns:
        column = table["tier"].fillna("").astype(str).str.strip().replace("", ALL)
        found["tier"] = np.asarray([check_tier(t, f"trace {path}: column tier") for t in column], dtype=object)[row_of]
    return found


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
    text = column.astype(object).where(column.notna(), "")  # an empty parquet cell is a null: as an empty CSV cell
    values = pd.to_numeric(text.replace("", "inf"), errors="coerce").to_numpy(dtype=float)
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
        per_row.append(merged(spans))
    owner, start, end = [], [], []
    for client, row in enumerate(row_of):
        spans = per_row[row]
        if spans and not np.isfinite(period[client]):
            raise ConfigError(
                f"trace {path}: client {client} has online intervals but no period_s; give period_s, the seconds "
                "after which its intervals repeat"
            )
        for a, b in spans:
            if b > period[client]:
                raise ConfigError(f"trace {path}: client {client}'s online interval {a:g}-{b:g} ends after period_s")
        if spans == [(0.0, period[client])]:
            continue  # online the whole period: always online
        for a, b in spans:
            owner.append(client)
            start.append(a)
            end.append(b)
    return np.asarray(owner, dtype=np.int64), np.asarray(start, dtype=float), np.asarray(end, dtype=float)


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` sorted, those that overlap or touch joined into one (``0-600 600-1800`` is ``0-1800``)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
