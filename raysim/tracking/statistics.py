"""The statistics a comparison over seeds reports (``raysim compare``, bench/baselines_table.py, bench/precision.py):
the mean with its two-sided 95% Student-t interval, the difference paired seed by seed with how many seeds agree in
sign, and the Pareto front of a trade-off. Pure functions of the figures; tests/tracking/test_statistics.py checks
them against hand-computed values."""

from __future__ import annotations

import numpy as np
from scipy import stats

LEVEL = 0.95
TIE = 1e-9  # a paired difference this close to 0 is a tie: float rounding, not a side


def interval(values) -> tuple[float, float]:
    """(mean, half-width of the two-sided 95% Student-t interval); the half-width is NaN for fewer than 2 values."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return float(values.mean()) if len(values) else float("nan"), float("nan")
    half = stats.t.ppf(0.5 + LEVEL / 2, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean()), float(half)


def paired(first: dict[int, float], other: dict[int, float]) -> tuple[float, float, int, int]:
    """Over the seeds both have: (mean of other - first, its CI half-width, seeds whose difference has the mean's
    sign, seeds). A difference or mean within :data:`TIE` of 0 has no sign: it agrees with nothing."""
    seeds = sorted(set(first) & set(other))
    differences = np.array([other[s] - first[s] for s in seeds])
    mean, half = interval(differences)
    side = np.sign(mean) if abs(mean) > TIE else 0.0
    agree = int((np.sign(np.where(np.abs(differences) > TIE, differences, 0.0)) == side).sum()) if side else 0
    return mean, half, agree, len(seeds)


def finite(values: dict[int, float]) -> dict[int, float]:
    """The seeds whose value is a number: a diagnostic without rows to rest on (NaN) leaves its seed out of the
    interval instead of blanking it."""
    return {seed: value for seed, value in values.items() if np.isfinite(value)}


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """The labels no other point beats on both axes (higher y, lower x), ordered by x."""
    front = [
        label
        for label, (x, y) in points.items()
        if not any(ox <= x and oy >= y and (ox, oy) != (x, y) for ox, oy in points.values())
    ]
    return sorted(front, key=lambda label: points[label][0])
