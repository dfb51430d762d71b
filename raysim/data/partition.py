"""Partitioners: assign the samples of a dataset to federated clients.

A *cell* is a (domain, class) pair. Every partitioner is a pure function that returns a share tensor
``shares[d, c, i]``, shape ``[D, C, M]``: the fraction of cell ``(d, c)`` that client ``i`` gets. The
same tensor splits the train and the test set (:func:`split_by_shares`), so each client's test set
follows its train proportions by construction. The rules, each from the paper it names:

* ``iid``: every cell split equally among all clients.
* ``pathological``: each client holds ``s`` classes drawn at random among the least held (``class_sets``),
  each class is held by ``s*M/C`` clients with shares ``U(0.4, 0.6)`` normalised over its holders (SGPT, CVPR
  2024, App. E.1).
* ``dirichlet``: per class, shares over clients ``~ Dirichlet(alpha)``.
* ``pachinko``: per client, ``Dirichlet(beta)`` over coarse labels, then ``Dirichlet(beta_fine)`` over
  the fine labels of each coarse label (FGPT, appendix), every client's N // M rows drawn one at a time, a label
  leaving the draw when its rows run out (Reddi et al., ICLR 2021, App. C, which FGPT cites; ``pachinko=reddi``), or
  each class split in proportion to the clients' drawn probabilities of it (``proportional``: client sizes vary).
* ``domains``: each client holds one domain; clients per domain form a geometric series whose
  largest/smallest ratio is the domain imbalance factor ``dif`` (FedGCR, AAAI 2024), the most clients to the first
  domain of ``domain_order``. ``domain_sizes``: each domain's rows all dealt, equally among its clients (``full``),
  or as FedGCR's authors' code deals them (``geometric``, :func:`_geometric_domain_shares`).

Everything is drawn from ``seed``, with independent streams for the shares, the train split and the
test split, so a change of the test set leaves the train split as it was.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from raysim.base.errors import ConfigError
from raysim.base.named import Registry

log = logging.getLogger("raysim")

_MAX_REDRAWS = 100


PACHINKO_FORMS = ("reddi", "proportional")  # N // M rows a client drawn one by one | each class split by shares


@dataclass(frozen=True)
class PartitionParams:
    """Knobs of the partitioners; each partitioner reads only its own."""

    s: int = 2  # pathological: classes per client
    class_sets: str = "random"  # pathological: how each client's classes are drawn (random | ring)
    alpha: float = 0.5  # dirichlet concentration
    beta: float = 0.5  # pachinko: concentration over coarse labels
    beta_fine: float = 10.0  # pachinko: concentration over fine labels inside a coarse label
    pachinko: str = "reddi"  # pachinko: one of PACHINKO_FORMS
    dif: float = 1.0  # domains: domain imbalance factor (largest/smallest clients per domain)
    domain_order: tuple[int, ...] | None = None  # domains: most clients first (DatasetInfo.imbalance_order)
    domain_sizes: str = "full"  # domains: every domain's rows dealt equally among its clients | geometric


@dataclass(frozen=True)
class Partitioner:
    """A registered partitioner; ``fn(D, C, M, params, rng, coarse_of_class, cell_sizes)`` (``cell_sizes``: the
    training rows of each (domain, class) cell, [D, C]) returns shares [D, C, M], or (train shares, test shares)
    where the test rows are dealt otherwise; ``reads``: the :class:`PartitionParams` it uses (they name a
    partition, e.g. in run names); ``also_reads``: those it uses that do not name it."""

    name: str
    description: str
    fn: Callable[..., np.ndarray]
    needs_domains: bool = False
    needs_coarse: bool = False
    reads: tuple[str, ...] = ()
    also_reads: tuple[str, ...] = ()

    @property
    def knobs(self) -> tuple[str, ...]:
        """Every :class:`PartitionParams` key this partitioner uses."""
        return self.reads + self.also_reads


@dataclass(frozen=True)
class Partition:
    """The result of :func:`partition`. Client id -1 marks a sample no client holds: of a class no client holds, or a
    training row a domain does not keep (``domain_sizes=geometric``). ``shares``: the training rows'."""

    train_client: np.ndarray
    test_client: np.ndarray
    client_domain: np.ndarray | None
    shares: np.ndarray


def _per_class(num_domains: int, class_shares: np.ndarray) -> np.ndarray:
    """Repeat [C, M] class shares for every domain."""
    return np.repeat(class_shares[None], num_domains, axis=0).astype(np.float64)


def _iid(num_domains, num_classes, num_clients, params, rng, coarse_of_class, cell_sizes):
    return np.full((num_domains, num_classes, num_clients), 1.0 / num_clients)


def random_class_sets(num_classes: int, num_clients: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """[M, s] classes: each client in turn takes s distinct classes at random among those held least so far
    (pFedHN's ``gen_classes_per_node``, which SGPT App. E.1 follows: "each client is randomly assigned s classes",
    the combinations varying), so holder counts differ by at most one."""
    held = np.empty((num_clients, s), dtype=np.int64)
    holders = np.zeros(num_classes, dtype=np.int64)
    for client in range(num_clients):
        chosen = np.lexsort((rng.random(num_classes), holders))[:s]  # the least held first, ties at random
        held[client] = chosen
        holders[chosen] += 1
    return held


def ring_class_sets(num_classes: int, num_clients: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """[M, s] classes: client i holds s consecutive classes of one shuffled ring (clients then shuffled), so holder
    counts differ by at most one but the sets repeat in blocks (C = 100, M = 100, s = 10: 10 distinct sets)."""
    perm = rng.permutation(num_classes)
    held = perm[(np.arange(num_clients)[:, None] * s + np.arange(s)) % num_classes]
    return held[rng.permutation(num_clients)]


CLASS_SETS = {"random": random_class_sets, "ring": ring_class_sets}


def _pathological(num_domains, num_classes, num_clients, params, rng, coarse_of_class, cell_sizes):
    # With s*M < C some classes have no holder: their rows stay zero and their samples are unassigned.
    held = CLASS_SETS[params.class_sets](num_classes, num_clients, params.s, rng)
    weights = np.zeros((num_classes, num_clients))
    weights[held, np.arange(num_clients)[:, None]] = rng.uniform(0.4, 0.6, size=held.shape)
    total = weights.sum(axis=1, keepdims=True)
    return _per_class(num_domains, np.divide(weights, total, out=np.zeros_like(weights), where=total > 0))


def _dirichlet(num_domains, num_classes, num_clients, params, rng, coarse_of_class, cell_sizes):
    return _per_class(num_domains, rng.dirichlet(np.full(num_clients, params.alpha), size=num_classes))


def _pachinko(num_domains, num_classes, num_clients, params, rng, coarse_of_class, cell_sizes):
    coarse_ids, coarse = np.unique(coarse_of_class, return_inverse=True)
    fine_of = [np.flatnonzero(coarse == k) for k in range(len(coarse_ids))]
    if params.pachinko == "reddi":
        counts = _pachinko_draws(fine_of, cell_sizes.sum(axis=0), num_clients, params, rng)
        return _cell_counts(counts, cell_sizes, rng) / np.maximum(cell_sizes, 1)[:, :, None]
    proportions = np.empty((num_clients, num_classes))  # p_i[c]
    for i in range(num_clients):
        coarse_p = rng.dirichlet(np.full(len(fine_of), params.beta))
        for k, fine in enumerate(fine_of):
            proportions[i, fine] = coarse_p[k] * rng.dirichlet(np.full(len(fine), params.beta_fine))
    total = proportions.sum(axis=0)
    # A class that every client draws with probability exactly 0 (tiny beta) is split equally.
    class_shares = np.divide(proportions, total, out=np.full_like(proportions, 1.0 / num_clients), where=total > 0)
    return _per_class(num_domains, class_shares.T)


def _pachinko_draws(fine_of: list[np.ndarray], class_sizes, num_clients: int, params, rng) -> np.ndarray:
    """[C, M] rows of each class each client draws, as Reddi et al. (ICLR 2021, App. C) deal CIFAR-100 (FedEM's
    ``pachinko_allocation_split`` likewise): client by client, a coarse multinomial ~ Dirichlet(beta) over the coarse
    labels with rows left and, per coarse label, a fine one ~ Dirichlet(beta_fine) over its fine labels with rows
    left; then N // M draws of a coarse and a fine label, one row each. A fine label whose rows run out leaves the
    draw (its coarse label's fine multinomial renormalised), and a coarse label with none left likewise. The N % M
    rows left over stay with no client."""
    left = np.asarray(class_sizes, dtype=np.int64).copy()
    counts = np.zeros((len(left), num_clients), dtype=np.int64)
    per_client = int(left.sum()) // num_clients
    for i in range(num_clients):
        fine = [f[left[f] > 0] for f in fine_of]
        fine = [f for f in fine if len(f)]  # the coarse labels with rows left
        coarse_p = rng.dirichlet(np.full(len(fine), params.beta))
        fine_p = [rng.dirichlet(np.full(len(f), params.beta_fine)) for f in fine]
        for _ in range(per_client):
            k = _draw(coarse_p, rng)
            j = _draw(fine_p[k], rng)
            label = fine[k][j]
            counts[label, i] += 1
            left[label] -= 1
            if left[label] == 0:
                fine[k], fine_p[k] = np.delete(fine[k], j), _renormalised(np.delete(fine_p[k], j))
                if not len(fine[k]):
                    del fine[k], fine_p[k]
                    coarse_p = _renormalised(np.delete(coarse_p, k))
    return counts


def _cell_counts(counts: np.ndarray, cell_sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[D, C, M] rows of each (domain, class) cell per client, from the [C, M] rows of each class drawn: a class's
    rows are dealt to its clients in a random order of their domains, so every count is whole (each client then
    gets exactly the rows it drew) and a client's rows of a class come from its domains in their sizes' proportion
    on average."""
    num_domains, num_classes = cell_sizes.shape
    cells = np.zeros((num_domains, num_classes, counts.shape[1]), dtype=np.int64)
    for label in range(num_classes):
        domains = rng.permutation(np.repeat(np.arange(num_domains), cell_sizes[:, label]))
        owner = np.repeat(np.arange(counts.shape[1]), counts[label])
        np.add.at(cells[:, label], (domains[: len(owner)], owner), 1)
    return cells


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn with probabilities ``p`` (a label without mass is never drawn)."""
    cumulative = np.cumsum(p)
    return int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))


def _renormalised(p: np.ndarray) -> np.ndarray:
    """``p`` over what is left; uniform where the labels left had no mass (a Dirichlet with a tiny concentration)."""
    total = p.sum()
    return p / total if total > 0 else np.full(len(p), 1.0 / max(len(p), 1))


def _domain_client_counts(num_domains: int, num_clients: int, dif: float) -> np.ndarray:
    """Clients per domain: a geometric series with max/min ratio as close to ``dif`` as integers allow.

    Every count is at least 1, the counts sum to ``num_clients`` and domain 0 gets the most. Among the
    (largest, smallest) pairs with the best ratio, the one whose geometric interior best fits the
    remaining clients wins.
    """
    if num_domains == 1:
        return np.array([num_clients], dtype=np.int64)
    steps = num_domains - 1
    best = None
    for low in range(1, num_clients // num_domains + 1):
        lo_high = max(low, math.ceil((num_clients - low) / steps))
        hi_high = num_clients - steps * low
        for high in {min(max(h, lo_high), hi_high) for h in (math.floor(low * dif), math.ceil(low * dif))}:
            ideal = low * (high / low) ** (np.arange(steps - 1, 0, -1) / steps)  # domains 1..D-2
            rest = num_clients - high - low
            key = (abs(math.log(high / low / dif)), abs(ideal.sum() - rest))
            if best is None or key < best[0]:
                best = (key, high, low, ideal, rest)
    _, high, low, ideal, rest = best
    target = ideal * rest / ideal.sum() if len(ideal) else ideal
    inner = np.clip(np.floor(target), low, high).astype(np.int64)
    while inner.sum() != rest:  # feasible: (D-2)*low <= rest <= (D-2)*high
        gap = target - inner
        if inner.sum() < rest:
            inner[np.argmax(np.where(inner < high, gap, -np.inf))] += 1
        else:
            inner[np.argmin(np.where(inner > low, gap, np.inf))] -= 1
    return np.concatenate([[high], np.sort(inner)[::-1], [low]]).astype(np.int64)


def _domains(num_domains, num_classes, num_clients, params, rng, coarse_of_class, cell_sizes):
    order = list(params.domain_order or range(num_domains))  # the k-th domain gets the series' k-th count
    counts, rank = np.empty(num_domains, dtype=np.int64), np.empty(num_domains, dtype=np.int64)
    counts[order], rank[order] = _domain_client_counts(num_domains, num_clients, params.dif), np.arange(num_domains)
    client_domain = np.repeat(np.arange(num_domains), counts)
    shares = np.zeros((num_domains, num_classes, num_clients))
    shares[client_domain, :, np.arange(num_clients)] = 1.0 / counts[client_domain, None]
    if params.domain_sizes == "geometric":
        return _geometric_domain_shares(client_domain, rank, num_classes, params.dif), shares
    return shares


def _geometric_domain_shares(client_domain: np.ndarray, rank: np.ndarray, num_classes: int, dif: float) -> np.ndarray:
    """The training shares of FedGCR's authors' domain sizes (fedgcr ``utils/util.py``, ``prepare_digit_uneven``):
    with r = dif^(1/(D-1)) the domain of ``rank`` k keeps r^-k of its training rows (the rest go to no client) and
    its j-th client holds r^j parts of them. So under DIF 10 the rarest domain has a tenth of the clients and a
    tenth of the rows. The authors take r^-k of the first domain's size, the same where the domains are the same
    size (the bundled digits5). Their clients each evaluate on their domain's whole test set; here a domain's test
    rows are dealt equally among its clients (:func:`_domains` returns the equal shares for them)."""
    num_domains = len(rank)
    ratio = dif ** (1 / (num_domains - 1))
    shares = np.zeros((num_domains, num_classes, len(client_domain)))
    for domain in range(num_domains):
        members = np.flatnonzero(client_domain == domain)
        parts = ratio ** np.arange(len(members))
        shares[domain, :, members] = (parts / parts.sum() * ratio ** -rank[domain])[:, None]
    return shares


PARTITIONERS: Registry[Partitioner] = Registry("partition")
for _partitioner in (
    Partitioner("iid", "every (domain, class) cell split equally among all clients", _iid),
    Partitioner(
        "pathological",
        "each client holds s classes with U(0.4, 0.6) shares (SGPT)",
        _pathological,
        reads=("s",),
        also_reads=("class_sets",),
    ),
    Partitioner("dirichlet", "per class, client shares ~ Dirichlet(alpha)", _dirichlet, reads=("alpha",)),
    Partitioner(
        "pachinko",
        "per client, Dirichlet(beta) over coarse labels then Dirichlet(beta_fine) over fine labels (FGPT); "
        "pachinko=reddi (default): N // M rows a client, drawn one by one as Reddi et al.",
        _pachinko,
        needs_coarse=True,
        reads=("beta", "beta_fine"),
        also_reads=("pachinko",),
    ),
    Partitioner(
        "domains",
        "each client holds one domain; clients per domain geometric with ratio dif (FedGCR); domain_sizes=geometric "
        "also shrinks the rarer domains' rows, as FedGCR's authors' code",
        _domains,
        needs_domains=True,
        reads=("dif",),
        also_reads=("domain_order", "domain_sizes"),
    ),
):
    PARTITIONERS.add(_partitioner.name, _partitioner)
_REDRAWN = {"dirichlet": "a larger alpha", "pachinko": "a larger beta"}  # random client sizes: redraw on failure


def _redraws(name: str, params: PartitionParams) -> bool:
    """Whether a draw that leaves a client too few rows is drawn again: where client sizes are random (not under
    ``pachinko=reddi``, whose clients all draw N // M rows)."""
    return name in _REDRAWN and not (name == "pachinko" and params.pachinko == "reddi")


def _cell_index(domains, labels, num_classes: int) -> np.ndarray:
    """Each row's (domain, class) cell as one index, ``domain * C + class``."""
    return np.asarray(domains, dtype=np.int64) * num_classes + np.asarray(labels, dtype=np.int64)


def split_by_shares(
    domains: np.ndarray, labels: np.ndarray, shares: np.ndarray, rng: np.random.Generator, partial: bool = False
) -> np.ndarray:
    """Client id (int64) per sample.

    Each cell's samples are shuffled with ``rng`` and dealt as whole counts: every client with a share
    gets ``floor(share * n)``, and the few samples left over go to the clients whose running total lags
    its expected total the most (largest remainder, carried across cells; ties broken at random). So
    every sample of a cell whose shares sum to 1 goes to exactly one client, never to a client whose
    share is 0, and each client's total stays within one sample of its expectation over all cells.
    Cells whose shares are all 0 get -1. ``partial``: a cell whose shares sum to f < 1 deals only about f * n of
    its samples, the rest -1, rounded with the remainder carried from cell to cell within a domain, so a domain
    keeps within one sample of its expected total (without it, a cell's samples are all dealt in its shares'
    proportions); each client's total then stays within one sample of its expectation given what was kept.
    """
    num_domains, num_classes, num_clients = shares.shape
    cell = _cell_index(domains, labels, num_classes)
    order = np.argsort(cell, kind="stable")
    sizes = np.bincount(cell, minlength=num_domains * num_classes)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    client = np.full(len(cell), -1, dtype=np.int64)
    lag = np.zeros(num_clients)  # expected minus received, summed over the cells dealt so far
    carry = np.zeros(num_domains)  # partial: rows kept minus rows expected, per domain, over the cells dealt so far
    for k in np.flatnonzero(sizes):
        row = shares[k // num_classes, k % num_classes]
        total = row.sum()
        if total <= 0:
            continue
        dealt = sizes[k]
        if partial and total < 1 - 1e-9:
            domain = k // num_classes
            dealt = int(np.clip(np.floor(total * sizes[k] - carry[domain] + 0.5), 0, sizes[k]))
            carry[domain] += dealt - total * sizes[k]
        expected = row / total * dealt
        counts = np.floor(expected).astype(np.int64)
        leftover = dealt - counts.sum()
        holders = np.flatnonzero(row > 0)
        holders = holders[rng.permutation(len(holders))]  # random tie-break
        priority = (lag + expected - counts)[holders]
        counts[holders[np.argsort(-priority, kind="stable")[:leftover]]] += 1
        lag += expected - counts
        members = rng.permutation(order[starts[k] : starts[k + 1]])
        client[members[:dealt]] = np.repeat(np.arange(num_clients), counts)
    return client


def _validate(name, num_classes, num_domains, num_clients, params, coarse_of_class) -> None:
    PARTITIONERS.get(name)  # unknown names: one line listing the valid ones
    if num_clients < 1:
        raise ConfigError(f"num_clients={num_clients} must be at least 1")
    if name == "pathological" and not 1 <= params.s <= num_classes:
        if params.s < 1:
            raise ConfigError(f"s={params.s} must be at least 1; choose 1 <= s <= {num_classes}")
        raise ConfigError(
            f"s={params.s} is larger than the number of classes ({num_classes}); choose s <= {num_classes}"
        )
    order = params.domain_order
    if name == "domains" and order is not None and sorted(order) != list(range(num_domains)):
        raise ConfigError(f"domain_order={order} must order the domains 0..{num_domains - 1}, each once")
    if name == "dirichlet" and not params.alpha > 0:
        raise ConfigError(f"alpha={params.alpha} must be positive; use e.g. alpha=0.5")
    if name == "pachinko":
        if params.pachinko not in PACHINKO_FORMS:
            raise ConfigError(f"pachinko={params.pachinko!r} is not one of: {', '.join(PACHINKO_FORMS)}")
        for key in ("beta", "beta_fine"):
            if not getattr(params, key) > 0:
                raise ConfigError(f"{key}={getattr(params, key)} must be positive; use e.g. {key}=0.5")
        if coarse_of_class is None:
            raise ConfigError(
                "partition 'pachinko' needs coarse labels; choose a dataset with coarse labels "
                "(e.g. CIFAR-100) or another partition"
            )
        if np.shape(coarse_of_class) != (num_classes,):
            raise ConfigError(
                f"coarse_of_class has shape {np.shape(coarse_of_class)}; it needs one coarse id per class "
                f"({num_classes})"
            )
    if name == "domains":
        if not params.dif >= 1:
            raise ConfigError(f"dif={params.dif} must be at least 1 (1 = balanced domains)")
        if num_domains < 2:
            raise ConfigError(
                f"partition 'domains' needs a dataset with several domains; this dataset has {num_domains}"
            )
        if num_clients < num_domains:
            raise ConfigError(
                f"partition 'domains' needs at least one client per domain: num_clients={num_clients} "
                f"< {num_domains} domains; use num_clients >= {num_domains}"
            )


def _check_data(kind, labels, domains, num_classes, num_domains) -> None:
    if np.shape(labels) != np.shape(domains):
        raise ConfigError(f"{kind} labels and domains differ in length ({len(labels)} vs {len(domains)})")
    for what, values, bound in (("labels", labels, num_classes), ("domains", domains, num_domains)):
        if len(values) and (np.min(values) < 0 or np.max(values) >= bound):
            raise ConfigError(f"{kind} {what} must lie in [0, {bound}); found {np.min(values)}..{np.max(values)}")


def partition(
    name: str,
    *,
    train_labels,
    train_domains,
    test_labels,
    test_domains,
    num_classes: int,
    num_domains: int,
    num_clients: int,
    params: PartitionParams,
    seed: int,
    coarse_of_class: np.ndarray | None = None,
    min_train_samples: int = 1,
) -> Partition:
    """Partition the train and test sets among ``num_clients`` clients with partitioner ``name``.

    Raises:
        ConfigError: for an unknown name, invalid parameters, or when some client ends up with fewer
            than ``min_train_samples`` training samples (after up to 100 redraws for dirichlet and
            proportional pachinko).
    """
    _validate(name, num_classes, num_domains, num_clients, params, coarse_of_class)
    _check_data("train", train_labels, train_domains, num_classes, num_domains)
    _check_data("test", test_labels, test_domains, num_classes, num_domains)
    if num_clients * min_train_samples > len(train_labels):
        raise ConfigError(
            f"num_clients={num_clients} clients need at least {min_train_samples} training "
            f"row{'s' if min_train_samples > 1 else ''} each, {num_clients * min_train_samples} in all, and the data "
            f"has {len(train_labels)}; "
            + (
                f"choose at most {len(train_labels) // min_train_samples} clients"
                if len(train_labels) >= min_train_samples
                else f"lower data.min_train_samples to at most {max(1, len(train_labels) // num_clients)}"
            )
        )
    share_rng, train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    fn = PARTITIONERS[name].fn
    draws = _MAX_REDRAWS + 1 if _redraws(name, params) else 1
    cell = _cell_index(train_domains, train_labels, num_classes)
    cell_sizes = np.bincount(cell, minlength=num_domains * num_classes).reshape(num_domains, num_classes)
    for _ in range(draws):
        drawn = fn(num_domains, num_classes, num_clients, params, share_rng, coarse_of_class, cell_sizes)
        shares, test_shares = drawn if isinstance(drawn, tuple) else (drawn, drawn)
        train_client = split_by_shares(train_domains, train_labels, shares, train_rng, partial=True)
        sizes = np.bincount(train_client[train_client >= 0], minlength=num_clients)
        if sizes.min() >= min_train_samples:
            break
    else:
        if _redraws(name, params):
            raise ConfigError(
                f"partition {name!r} left a client with {sizes.min()} training samples (< min_train_samples="
                f"{min_train_samples}) in {draws} draws with {num_clients} clients; use fewer clients or "
                f"{_REDRAWN[name]}"
            )
        raise ConfigError(
            f"partition {name!r} gives client {int(sizes.argmin())} only {sizes.min()} training samples "
            f"(< min_train_samples={min_train_samples}) with num_clients={num_clients}; use fewer clients"
        )
    test_client = split_by_shares(test_domains, test_labels, test_shares, test_rng)
    unheld = int((shares.sum(axis=2) <= 0)[np.asarray(train_domains), np.asarray(train_labels)].sum())
    if unheld:  # pathological with s * M < C, or a pachinko class all of whose rows were left over: no client has it
        log.warning(
            "partition %s leaves %d of %d training rows, and their classes' test rows, to no client (classes no "
            "client holds); %s",
            name,
            unheld,
            len(train_client),
            "raise data.s or the number of clients to use them" if name == "pathological" else "use fewer clients",
        )
    client_domain = shares.sum(axis=1).argmax(axis=0).astype(np.int64) if PARTITIONERS[name].needs_domains else None
    return Partition(train_client, test_client, client_domain, shares)


def held_out_clients(
    count: int, num_clients: int, client_domain: np.ndarray | None, rng: np.random.Generator
) -> tuple[int, ...]:
    """The ``count`` clients that never train (``federation.unseen_fraction``: FGPT/SGPT's unseen clients), at
    random, sorted. Where clients have types (domains), no type loses its last training client: the unseen clients
    are new clients of the domains the model trains on, not a domain it never saw (which would also leave that type
    out of sigma_type)."""
    if client_domain is None:
        return tuple(sorted(int(c) for c in rng.choice(num_clients, size=count, replace=False)))
    training = np.bincount(client_domain)
    types = int((training > 0).sum())
    if count > num_clients - types:
        raise ConfigError(
            f"federation.unseen_fraction holds out {count} of {num_clients} clients, but each of the {types} client "
            f"types keeps one training client: hold out at most {num_clients - types} (lower it or add clients)"
        )
    held: list[int] = []
    for client in rng.permutation(num_clients):
        if len(held) == count:
            break
        if training[client_domain[client]] > 1:
            training[client_domain[client]] -= 1
            held.append(int(client))
    return tuple(sorted(held))
