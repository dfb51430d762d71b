"""The noise a private run uses and the budget it has spent: ``privacy.noise_multiplier`` as given, or calibrated
from ``privacy.target_epsilon`` and ``privacy.delta`` for the configured rounds before the run starts, and the
epsilon spent after each round, all from the run's config and its clients' sizes, so the driver, the coordinator
and every worker compute the same numbers and a resumed run continues them.

User-level: the DP event of a round is the cohort's sampling (``federation.sampling``) of a Gaussian sum over the
trainable clients (:func:`~raysim.privacy.accounting.user_event`), T rounds composed.

Record-level: a client of n rows takes S = E ceil(n / B) local steps a round, each a batch of min(B, n) of its rows
(:mod:`~raysim.privacy.dp_sgd`), in every one of the T rounds (a client's chance of sitting a round out is not
counted: an upper bound). The guarantee is the worst client's, and it is not the smallest client's: the steps grow
with n in jumps, so a client just past a multiple of B may spend more than a smaller one. The clients with the same
S differ only in their sampling rate min(B, n) / n, largest for the fewest rows, so the run accounts the smallest
client of each S (:func:`record_units`) and reports their largest epsilon.
"""

from __future__ import annotations

from functools import lru_cache

from raysim.base.errors import ConfigError

Units = tuple[int, ...]  # record-level: the clients' sizes whose epsilons bound every client's (record_units)


def _accounting():
    """dp-accounting, with SciPy: loaded by private runs only (a worker and the coordinator of any other run never)."""
    from raysim.privacy import accounting

    return accounting


def record_units(config, shards) -> Units:
    """For each number of local steps a training client takes, the fewest rows of a client taking that many: the
    sizes whose epsilons bound every client's (empty for a run without record-level DP)."""
    if config.privacy.mode != "record":
        return ()
    batch = config.train.batch_size
    smallest: dict[int, int] = {}
    for n in shards.train_sizes()[shards.seen_clients()].tolist():
        steps = -(-int(n) // batch)
        smallest[steps] = min(smallest.get(steps, n), int(n))
    return tuple(sorted(smallest.values()))


class _Event:
    """The run's DP events as a function of (z, rounds): hashable, so a calibration is cached per setting."""

    def __init__(self, config, units: Units):
        fed, train = config.federation, config.train
        if config.privacy.mode == "user":
            self.values = ("user", fed.clients_per_round, fed.trainable_clients, fed.rounds, fed.sampling)
        else:
            self.values = ("record", train.batch_size, train.local_epochs, fed.rounds, units)

    def __call__(self, z: float, rounds: int | None = None):
        accounting = _accounting()
        if self.values[0] == "user":
            _, cohort, population, total, sampling = self.values
            return accounting.user_event(z, cohort, population, total if rounds is None else rounds, sampling)
        _, batch, epochs, total, units = self.values
        rounds = total if rounds is None else rounds
        return tuple(accounting.record_event(z, min(batch, n), n, epochs * -(-n // batch) * rounds) for n in units)

    def __hash__(self):
        return hash(self.values)

    def __eq__(self, other):
        return isinstance(other, _Event) and self.values == other.values


@lru_cache(maxsize=64)
def _calibrated(event_of: _Event, target: float, delta: float, accountant: str) -> float:
    try:
        return _accounting().calibrate(event_of, target, delta, accountant)
    except ValueError as error:
        raise ConfigError(f"privacy.target_epsilon={target:g}: {error}") from None


def noise_multiplier(config, units: Units = ()) -> float:
    """z: the given ``privacy.noise_multiplier``, or the smallest z whose epsilon after the last round is at most
    ``privacy.target_epsilon`` (``units``: :func:`record_units`, for record-level DP)."""
    p = config.privacy
    if p.noise_multiplier is not None:
        return p.noise_multiplier
    return _calibrated(_Event(config, units), p.target_epsilon, p.delta, p.accountant)


def count_noise(config) -> float:
    """Adaptive clipping's noise on the count of unclipped clients: ``privacy.count_noise``, else m / 20 (Andrew et
    al.'s choice); 0 for a fixed clip."""
    p = config.privacy
    if p.mode != "user" or p.adaptive is None:
        return 0.0
    return p.count_noise or config.federation.clients_per_round / 20


def update_noise(config, units: Units = ()) -> float:
    """The noise multiplier the update gets: z, less what adaptive clipping's count spends of it
    (:func:`~raysim.privacy.accounting.split_noise`)."""
    z, std = noise_multiplier(config, units), count_noise(config)
    if not std:
        return z
    try:
        return _accounting().split_noise(z, std)
    except ValueError:
        raise ConfigError(
            f"privacy.clip={config.privacy.clip}: the count's noise privacy.count_noise={std:g} must exceed z / 2 = "
            f"{z / 2:.4g}, or the count alone spends all of z; raise privacy.count_noise"
        ) from None


def spent(config, rounds: int, units: Units = ()) -> float:
    """The epsilon spent, at ``privacy.delta``, after ``rounds`` rounds (the worst client's, record-level)."""
    p = config.privacy
    events = _Event(config, units)(noise_multiplier(config, units), rounds)
    return _accounting().worst_epsilon(events, p.delta, p.accountant)


def relation(config) -> str:
    """The neighbouring relation the run's epsilon holds under, in words (a fixed-size sample: replace one unit)."""
    fixed = config.privacy.mode == "record" or config.federation.sampling == "fixed"
    unit = "client" if config.privacy.mode == "user" else "row"
    return f"replace one {unit}" if fixed else f"add or remove one {unit}"


def check_delta(config, units: Units = ()) -> None:
    """Refuse a delta of at least 1 / (the units it protects): the trainable clients (user level), the smallest
    client's training rows (record level, ``units``: :func:`record_units`); such a delta allows releasing one unit's
    data outright."""
    p = config.privacy
    if p.mode == "user":
        count, what, unit = config.federation.trainable_clients, "the trainable clients", "one client's data"
    elif p.mode == "record" and units:
        count, what, unit = units[0], "the training rows of the smallest client", "one row"
    else:
        return
    if p.delta >= 1 / count:
        raise ConfigError(
            f"privacy.delta={p.delta:g} is at least 1 / {count} ({what}), which allows releasing {unit} "
            f"outright; use a delta below {1 / count:.3g}, e.g. {10 ** -(len(str(count)) + 1):g}"
        )
