"""Differential-privacy accounting with Google's dp-accounting: the event each privacy mode releases, and its epsilon.

raysim's noise multiplier ``z`` is the noise standard deviation over the clip C: a round (user level, DP-FedAvg,
McMahan et al., ICLR 2018) or a local step (record level, DP-SGD, Abadi et al., CCS 2016) adds N(0, (z C)^2 I) to
the SUM of vectors each clipped to L2 norm C, the sum of a sample of units (clients, or one client's records). What
the noise multiplier of a dp-accounting ``GaussianDpEvent`` means depends on the neighbouring relation, so the event
depends on the sampling:

* ``sampling="poisson"`` (each of the N units taken independently with probability q = m / N):
  ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``, accounted under ADD_OR_REMOVE_ONE. Adding or removing one unit
  moves the sum by at most C, so z is the noise over the L2 sensitivity, which is what both accountants take: RDP
  the sampled Gaussian mechanism's (Mironov, Talwar, Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism"), PLD the pair q N(1, z^2) + (1 - q) N(0, z^2) against N(0, z^2), for removal and for addition (Zhu,
  Dong, Wang 2022, "Optimal Accounting of Differential Privacy via Characteristic Function"). Dividing the noised sum
  by the expected size m (DP-FedAvg) is post-processing; dividing by the realised size would not be.
* ``sampling="fixed"`` (exactly m of the N units uniformly without replacement, independent across rounds or steps):
  ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z / 2))``, accounted under REPLACE_ONE. With the sample
  size fixed, N is public and neighbours replace one unit, which moves the sum of clipped vectors by up to 2C.
  dp-accounting's RDP accountant takes this event only under REPLACE_ONE and evaluates Wang, Balle, Kasiviswanathan
  2019 ("Subsampled Rényi Differential Privacy and Analytical Moments Accountant", Theorem 27) with the base
  Gaussian's RDP alpha / (2 sigma^2), sigma the noise over the REPLACE_ONE sensitivity (``rdp_privacy_accountant.
  _compute_rdp_sample_wor_gaussian``): sigma = z C / (2 C) = z / 2; passing z would report the guarantee of
  sensitivity C, half the true one. Its PLD accountant has no sampling without replacement: :func:`epsilon` says so.
  (The two accountants also read a bare ``GaussianDpEvent(s)`` differently under REPLACE_ONE, PLD comparing
  N(-1, s^2) with N(1, s^2) and RDP N(0, s^2) with N(1, s^2), so this module never accounts a Gaussian outside a
  sampling event.)

The two relations give different guarantees: (epsilon, delta) under ADD_OR_REMOVE_ONE implies (2 epsilon,
(1 + e^epsilon) delta) under REPLACE_ONE, not (epsilon, delta); :func:`relation` names the one an event is accounted
under, to be reported with its epsilon.

Composition: T rounds (user level), or S x T local steps (record level: a client may take part in every round, and no
amplification from client sampling is claimed) are ``SelfComposedDpEvent(step, count)``. The RDP accountant (Mironov
2017, "Rényi Differential Privacy") works on dp-accounting's default orders, 1.1 to 10.9 by 0.1, 11 to 63, 128, 256,
512 and 1024, and turns RDP into (epsilon, delta) with Canonne, Kamath, Steinke 2020 (Proposition 12); the RDP of
one step is computed once per distinct step and cached, so the epsilon after round r costs a multiplication and that
conversion. The PLD accountant (connect-the-dots discretisation at 1e-4, Doroshenko et al. 2022; composition by FFT,
Koskela, Jälkö, Honkela 2020) is tighter and composes afresh on every call.

Adaptive clipping (Andrew et al., NeurIPS 2021) also releases a noised count each round; accounting takes the
combined z, and :func:`split_noise` gives the share left to the update.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterator

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import optimize

from raysim.base.errors import ConfigError

ACCOUNTANTS = ("rdp", "pld")
SAMPLINGS = ("fixed", "poisson")
RDP_ORDERS = tuple(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
CALIBRATION_RTOL = 1e-4  # calibrate's z is within this (relative) of the smallest: epsilon ~0.05% under the target

_Relation = dp_accounting.NeighboringRelation


def user_event(z: float, cohort: int, population: int, rounds: int, sampling: str = "fixed") -> dp_accounting.DpEvent:
    """User-level DP-FedAvg over ``rounds`` rounds, each noising the clipped sum of a cohort of ``cohort`` clients
    drawn from ``population`` by ``sampling``."""
    return _sampled_gaussian(z, cohort, population, rounds, sampling, ("cohort", "population", "rounds"))


def record_event(z: float, batch: int, records: int, steps: int, sampling: str = "fixed") -> dp_accounting.DpEvent:
    """Record-level DP-SGD inside one client with ``records`` records, over ``steps`` local steps in all (steps per
    round x rounds), each noising the per-record clipped sum of a batch of ``batch`` drawn by ``sampling``. The run's
    guarantee is the largest epsilon over its clients, which need not be the client with the fewest records (fewer
    records can mean fewer steps): :func:`raysim.privacy.calibration.record_units`."""
    return _sampled_gaussian(z, batch, records, steps, sampling, ("batch", "records", "steps"))


def relation(event: dp_accounting.DpEvent) -> dp_accounting.NeighboringRelation:
    """The neighbouring relation ``event`` is accounted under: REPLACE_ONE where it samples without replacement,
    ADD_OR_REMOVE_ONE otherwise."""
    wor = any(isinstance(e, dp_accounting.SampledWithoutReplacementDpEvent) for e in _nested(event))
    return _Relation.REPLACE_ONE if wor else _Relation.ADD_OR_REMOVE_ONE


def epsilon(event: dp_accounting.DpEvent, delta: float, accountant: str = "rdp") -> float:
    """The epsilon ``event`` spends at ``delta`` under :func:`relation`'s relation (inf where z = 0)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta} must be in (0, 1)")
    rel = relation(event)
    fresh = _accountant(accountant, rel)
    if not fresh.supports(event):
        if accountant == "pld" and rel is _Relation.REPLACE_ONE:
            raise ValueError(
                "accountant='pld' cannot account sampling='fixed'; use accountant='rdp' or sampling='poisson'"
            )
        raise ValueError(f"accountant={accountant!r} cannot account {event}; build it with user_event or record_event")
    if accountant == "pld":
        try:
            with np.errstate(over="ignore", divide="ignore"):  # z near 0 overflows on its way to the error below
                return float(fresh.compose(event).get_epsilon(delta))
        except (MemoryError, OverflowError):  # a privacy-loss distribution too wide to discretise (z near 0)
            raise ConfigError(
                f"the PLD accountant cannot discretise {event}'s privacy loss (the noise is too small); pass "
                "privacy.accountant=rdp"
            ) from None
    count = 1
    while isinstance(event, dp_accounting.SelfComposedDpEvent):
        count, event = count * event.count, event.event
    try:
        step_rdp = _rdp(event)
    except TypeError:  # an unhashable event (a ComposedDpEvent holds a list) is not cached
        step_rdp = _rdp.__wrapped__(event)
    except (ZeroDivisionError, OverflowError):  # z so small (1e-300) that the series divides by 1 / z^2 = inf
        return math.inf
    rdp = np.where(np.isnan(step_rdp), np.inf, count * np.asarray(step_rdp))  # NaN: a noise too small to compute
    return float(rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)[0])


def worst_epsilon(events, delta: float, accountant: str = "rdp") -> float:
    """The largest :func:`epsilon` of ``events`` (one event, or several: a run's units that differ, each its own)."""
    if isinstance(events, dp_accounting.DpEvent):
        return epsilon(events, delta, accountant)
    return max(epsilon(event, delta, accountant) for event in events)


def calibrate(
    event_of: Callable[[float], object], target_epsilon: float, delta: float, accountant: str = "rdp"
) -> float:
    """The smallest z, to ``CALIBRATION_RTOL`` relative, whose ``event_of(z)`` (an event, or several whose worst
    counts: :func:`worst_epsilon`) spends at most ``target_epsilon`` at ``delta``: a bracket by factors of e^2 from
    [1/e, e], Brent's method on log z, then up by ``CALIBRATION_RTOL`` until the target holds. (dp-accounting's
    ``calibrate_dp_mechanism`` runs the same Brent search, but with a tolerance absolute in z and a fresh accountant
    per evaluation: about twice the evaluations of :func:`epsilon`, whose cache serves the repeats, at ~0.2 s each
    for a fixed-size step.)"""
    if not 0 < target_epsilon < math.inf:
        raise ValueError(f"target_epsilon={target_epsilon} must be positive and finite")
    gap = lambda log_z: worst_epsilon(event_of(math.exp(log_z)), delta, accountant) - target_epsilon
    low, high = -1.0, 1.0
    while gap(low) <= 0:
        if low < -20:
            raise ValueError(f"target_epsilon={target_epsilon} is met without noise: nothing to calibrate")
        low, high = low - 2, low
    while gap(high) > 0:
        if high > 20:
            raise ValueError(f"target_epsilon={target_epsilon} is not met at z = e^20: event_of ignores z?")
        low, high = high, high + 2
    z = math.exp(optimize.brentq(gap, low, high, xtol=CALIBRATION_RTOL))
    while worst_epsilon(event_of(z), delta, accountant) > target_epsilon:
        z *= 1 + CALIBRATION_RTOL
    return z


def split_noise(z: float, count_std: float) -> float:
    """The update's noise multiplier under adaptive clipping, given the combined ``z`` and the standard deviation
    ``count_std`` (sigma_b) of the noise on the clipped-count: Andrew, Thakkar, McMahan, Ramaswamy, "Differentially
    Private Learning with Adaptive Clipping", NeurIPS 2021 (Theorem 1): a round noising the updates with z_update and
    the count with sigma_b is one Gaussian mechanism with z^-2 = z_update^-2 + (2 sigma_b)^-2. The count must be of
    centred bits b - 1/2, as the paper's: their sensitivity (1/2 under add/remove, 1 under replace-one) is half the
    update's over C (1, 2) under both relations, so one combined z serves either; an uncentred count has sensitivity
    1 under add/remove too, and the split would overstate the privacy of a Poisson-sampled run."""
    if not z >= 0:
        raise ValueError(f"z={z} must be >= 0")
    if not 2 * count_std > z:
        raise ValueError(
            f"count_std={count_std} must exceed z / 2 = {z / 2:g}: the count alone would spend all of z={z}"
        )
    return 0.0 if z == 0 else (z**-2 - (2 * count_std) ** -2) ** -0.5


def _sampled_gaussian(
    z: float, sample: int, population: int, count: int, sampling: str, names: tuple[str, str, str]
) -> dp_accounting.DpEvent:
    """``count`` compositions of the Gaussian on a sample of ``sample`` of ``population`` units (module docstring)."""
    if not z >= 0:
        raise ValueError(f"z={z} must be >= 0 (the noise standard deviation over the clip C)")
    if not 1 <= sample <= population:
        raise ValueError(f"{names[0]}={sample} must be in [1, {names[1]}={population}]")
    if count < 0:
        raise ValueError(f"{names[2]}={count} must be >= 0")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling={sampling!r} is not one of {', '.join(map(repr, SAMPLINGS))}")
    if count == 0:
        return dp_accounting.NoOpDpEvent()
    if z == 0:
        step = dp_accounting.NonPrivateDpEvent()
    elif sampling == "poisson":
        step = dp_accounting.PoissonSampledDpEvent(sample / population, dp_accounting.GaussianDpEvent(z))
    else:
        step = dp_accounting.SampledWithoutReplacementDpEvent(population, sample, dp_accounting.GaussianDpEvent(z / 2))
    return dp_accounting.SelfComposedDpEvent(step, count)


def _accountant(name: str, rel: dp_accounting.NeighboringRelation) -> dp_accounting.PrivacyAccountant:
    """A fresh accountant ``name`` under ``rel``."""
    if name == "rdp":
        return dp_accounting.rdp.RdpAccountant(RDP_ORDERS, rel)
    if name == "pld":
        return dp_accounting.pld.PLDAccountant(rel)
    raise ValueError(f"accountant={name!r} is not one of {', '.join(map(repr, ACCOUNTANTS))}")


@functools.lru_cache(maxsize=64)
def _rdp(event: dp_accounting.DpEvent) -> np.ndarray:
    """The RDP of one ``event`` at ``RDP_ORDERS``."""
    with _quietly():
        return _accountant("rdp", relation(event)).compose(event).rdp


@contextlib.contextmanager
def _quietly():
    """dp-accounting warns through absl of each RDP order at which its series for Poisson sampling does not converge
    (small orders), and drops that order, which can only make epsilon larger; a run stays silent."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _nested(event: dp_accounting.DpEvent) -> Iterator[dp_accounting.DpEvent]:
    """``event`` and every event inside it."""
    yield event
    for child in [getattr(event, "event", None), *getattr(event, "events", ())]:
        if child is not None:
            yield from _nested(child)
