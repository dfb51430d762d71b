"""Device traces that ship with raysim (``systems.trace=example``); ``bench/make_example_trace.py`` generates them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from raysim.base.errors import ConfigError
from raysim.base.paths import why_not_a_file


def shipped() -> list[str]:
    """The names of the shipped traces."""
    return sorted(p.name[: -len(".csv")] for p in resources.files(__name__).iterdir() if p.name.endswith(".csv"))


def resolve(name_or_path: str) -> Path:
    """A trace file: the given path, or a shipped trace by name; a one-line ConfigError otherwise."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if name_or_path in shipped():
        return Path(str(resources.files(__name__).joinpath(f"{name_or_path}.csv")))
    raise ConfigError(
        f"trace {name_or_path} {why_not_a_file(path)}; pass a CSV or parquet file (docs/systems.md) or a shipped "
        f"trace: {', '.join(shipped())}"
    )
