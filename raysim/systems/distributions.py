"""A positive per-client quantity given as text (``systems.speed=lognormal:3,0.5``): parsed and drawn."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raysim.base.errors import ConfigError

DISTRIBUTIONS = {"uniform": 2, "lognormal": 2}  # name -> number of parameters


@dataclass(frozen=True)
class Distribution:
    """A positive quantity per client: ``constant`` (one parameter), ``uniform`` (low, high) or ``lognormal``
    (mu, sigma of its natural log)."""

    kind: str
    params: tuple[float, ...]

    def draw(self, generator: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "constant":
            return np.full(n, self.params[0])
        if self.kind == "uniform":
            return generator.uniform(*self.params, size=n)
        return generator.lognormal(*self.params, size=n)


def parse_distribution(key: str, text: str) -> Distribution:
    """``'lognormal:0,1'`` -> Distribution; a one-line ConfigError naming ``key`` otherwise."""
    example = f"{key}=lognormal:3,0.5 (ln of the value ~ N(3, 0.5)), uniform:10,50 or 20"
    name, _, rest = str(text).partition(":")
    try:
        if not rest:
            value = float(name)
            if not value > 0 or not np.isfinite(value):
                raise ValueError
            return Distribution("constant", (value,))
        params = tuple(float(p) for p in rest.split(","))
    except ValueError:
        raise ConfigError(f"{key}={text!r} is not a positive number or NAME:PARAMS; e.g. {example}") from None
    if name not in DISTRIBUTIONS:
        raise ConfigError(f"{key}={text!r}: unknown distribution {name!r}; valid: {', '.join(DISTRIBUTIONS)}")
    if len(params) != DISTRIBUTIONS[name] or not all(np.isfinite(params)):
        raise ConfigError(f"{key}={text!r}: {name} takes {DISTRIBUTIONS[name]} numbers; e.g. {example}")
    if name == "uniform" and not 0 < params[0] <= params[1]:
        raise ConfigError(f"{key}={text!r}: uniform needs 0 < LOW <= HIGH")
    if name == "lognormal" and params[1] < 0:
        raise ConfigError(f"{key}={text!r}: lognormal's SIGMA must be >= 0")
    return Distribution(name, params)
