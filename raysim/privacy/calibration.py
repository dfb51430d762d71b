"""The noise a private run uses and the budget it has spent: ``privacy.noise_multiplier`` as given, or calibrated
from ``privacy.target_epsilon`` and ``privacy.delta`` for the configured rounds before the run starts, and the
epsilon spent after each round, all from the run's config and its clients' sizes, so the driver, the coordinator
and every worker compute the same numbers and a resumed run continues them.

User-level: the DP event of a round is the cohort's sampling (``federation.sampling``) of a Gaussian sum over the
trainable clients (:func:`~raysim.privacy.accounting.user_event`), T rounds composed. Record-level: a client's
local steps (epochs x ceil(n / B), :mod:`~raysim.privacy.dp_sgd`) in every one of the T rounds, composed, for the
smallest training client (the largest sampling rate B / n: every other client's records are at least as private);
a client's chance of sitting a round out is not counted (an upper bound)."""

from __future__ import annotations

from functools import lru_cache

from raysim.base.errors import ConfigError


def _accounting():
    """dp-accounting, with SciPy: loaded by private runs only (a worker and the coordinator of any other run never)."""
    from raysim.privacy import accounting

    return accounting


@lru_cache(maxsize=64)
def _calibrated(event_of, target: float, delta: float, accountant: str) -> float:
    try:
        return _accounting().calibrate(event_of, target, delta, accountant)
    except ValueError as error:
        raise ConfigError(f"privacy.target_epsilon={target:g}: {error}") from None


def noise_multiplier(config, smallest: int = 0) -> float:
    """z: the given ``privacy.noise_multiplier``, or the smallest z whose epsilon after the last round is at most
    ``privacy.target_epsilon`` (``smallest``: the fewest training rows of a client, for record-level DP)."""
    p = config.privacy
    if p.noise_multiplier is not None:
        return p.noise_multiplier
    return _calibrated(_key(config, smallest), p.target_epsilon, p.delta, p.accountant)


def count_noise(config) -> float:
    """Adaptive clipping's noise on the count of unclipped clients: ``privacy.count_noise``, else m / 20 (Andrew et
    al.'s choice); 0 for a fixed clip."""
    p = config.privacy
    if p.mode != "user" or p.adaptive is None:
        return 0.0
    return p.count_noise or config.federation.clients_per_round / 20


def update_noise(config, smallest: int = 0) -> float:
    """The noise multiplier the update gets: z, less what adaptive clipping's count spends of it
    (:func:`~raysim.privacy.accounting.split_noise`)."""
    z, std = noise_multiplier(config, smallest), count_noise(config)
    if not std:
        return z
    try:
        return _accounting().split_noise(z, std)
    except ValueError:
        raise ConfigError(
            f"privacy.clip={config.privacy.clip}: the count's noise privacy.count_noise={std:g} must exceed z / 2 = "
            f"{z / 2:.4g}, or the count alone spends all of z; raise privacy.count_noise"
        ) from None


def spent(config, rounds: int, smallest: int = 0) -> float:
    """The epsilon spent, at ``privacy.delta``, after ``rounds`` rounds."""
    p = config.privacy
    z = noise_multiplier(config, smallest)
    return _accounting().epsilon(_key(config, smallest)(z, rounds), p.delta, p.accountant)


class _Event:
    """A hashable event builder (z, rounds) -> DpEvent for one run's settings: calibration is cached per setting."""

    def __init__(self, mode: str, values: tuple):
        self.mode, self.values = mode, values

    def __call__(self, z: float, rounds: int | None = None):
        if self.mode == "user":
            cohort, population, total, sampling = self.values
            return _accounting().user_event(z, cohort, population, total if rounds is None else rounds, sampling)
        batch, records, steps, total = self.values
        return _accounting().record_event(z, batch, records, steps * (total if rounds is None else rounds))

    def __hash__(self):
        return hash((self.mode, self.values))

    def __eq__(self, other):
        return isinstance(other, _Event) and (self.mode, self.values) == (other.mode, other.values)


def _key(config, smallest: int) -> _Event:
    fed, train = config.federation, config.train
    if config.privacy.mode == "user":
        return _Event("user", (fed.clients_per_round, fed.trainable_clients, fed.rounds, fed.sampling))
    steps = train.local_epochs * -(-smallest // train.batch_size)
    return _Event("record", (min(train.batch_size, smallest), smallest, steps, fed.rounds))


def smallest_client(shards) -> int:
    """The fewest training rows of a client that trains (record-level DP's accounting unit); 0 without one."""
    seen = shards.seen_clients()
    return int(shards.train_sizes()[seen].min()) if len(seen) else 0


def check_record_delta(config, smallest: int) -> None:
    """Refuse a record-level delta of at least 1 / (the smallest client's training rows): such a delta allows
    releasing one row outright. (User-level's bound, 1 / trainable clients, the config checks.)"""
    p = config.privacy
    if p.mode == "record" and p.delta >= 1 / smallest:
        raise ConfigError(
            f"privacy.delta={p.delta:g} is at least 1 / {smallest} (the training rows of the smallest client); use "
            f"a delta below {1 / smallest:.3g}"
        )
