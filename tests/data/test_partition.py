"""Tests of the partitioners, split_by_shares and the partition summary/plot."""

import hashlib

import numpy as np
import pytest

from raysim.base.errors import ConfigError
from raysim.data.partition import (
    PARTITIONERS,
    Partition,
    PartitionParams,
    held_out_clients,
    partition,
    random_class_sets,
    ring_class_sets,
    split_by_shares,
)
from raysim.data.partition_plot import partition_artifacts, partition_summary, plot_partition
from raysim.engine.setup import prepare_shards
from raysim.testing.smoke import smoke_config


def _dataset(num_domains, num_classes, per_cell, seed=0):
    """Labels and domains with exactly ``per_cell`` samples per (domain, class) cell, shuffled."""
    cells = np.repeat(np.arange(num_domains * num_classes), per_cell)
    np.random.default_rng(seed).shuffle(cells)
    return cells % num_classes, cells // num_classes


def _run(
    name,
    *,
    num_classes=10,
    num_domains=1,
    num_clients=10,
    train_per_cell=100,
    test_per_cell=50,
    seed=0,
    coarse_of_class=None,
    min_train_samples=1,
    **params,
):
    train_labels, train_domains = _dataset(num_domains, num_classes, train_per_cell, seed=1)
    test_labels, test_domains = _dataset(num_domains, num_classes, test_per_cell, seed=2)
    part = partition(
        name,
        train_labels=train_labels,
        train_domains=train_domains,
        test_labels=test_labels,
        test_domains=test_domains,
        num_classes=num_classes,
        num_domains=num_domains,
        num_clients=num_clients,
        params=PartitionParams(**params),
        seed=seed,
        coarse_of_class=coarse_of_class,
        min_train_samples=min_train_samples,
    )
    return part, (train_labels, train_domains), (test_labels, test_domains)


def _counts(client, labels, num_clients, num_classes):
    counts = np.zeros((num_clients, num_classes), dtype=np.int64)
    np.add.at(counts, (client, labels), 1)
    return counts


COARSE = np.arange(20) // 4  # 20 fine classes in 5 coarse labels of 4


def _any(name):
    if name == "pachinko":
        return _run(name, num_classes=20, coarse_of_class=COARSE)
    if name == "domains":
        return _run(name, num_domains=3, num_clients=6)
    return _run(name)


# --- all partitioners ---------------------------------------------------------------------------------


def test_registry_names_and_descriptions():
    assert set(PARTITIONERS) == {"iid", "pathological", "dirichlet", "pachinko", "domains"}
    for name, p in PARTITIONERS.items():
        assert p.name == name and p.description and "\n" not in p.description


@pytest.mark.parametrize("name", sorted(PARTITIONERS))
def test_shapes_and_every_sample_assigned_once(name):
    part, (train_labels, train_domains), (test_labels, _) = _any(name)
    num_classes = 20 if name == "pachinko" else 10
    num_domains = 3 if name == "domains" else 1
    num_clients = 6 if name == "domains" else 10
    assert isinstance(part, Partition)
    assert part.shares.shape == (num_domains, num_classes, num_clients)
    assert part.shares.dtype == np.float64
    np.testing.assert_allclose(part.shares.sum(axis=2), 1.0)
    for client, n in ((part.train_client, len(train_labels)), (part.test_client, len(test_labels))):
        assert client.shape == (n,) and client.dtype == np.int64
        assert client.min() >= 0 and client.max() < num_clients  # one client per sample, none dropped
    assert (part.client_domain is not None) == (name == "domains")


@pytest.mark.parametrize("name", sorted(PARTITIONERS))
def test_determinism_by_seed(name):
    kwargs = {"num_classes": 20, "coarse_of_class": COARSE} if name == "pachinko" else {}
    if name == "domains":
        kwargs = {"num_domains": 3, "num_clients": 6}
    a, _, _ = _run(name, seed=7, **kwargs)
    b, _, _ = _run(name, seed=7, **kwargs)
    c, _, _ = _run(name, seed=8, **kwargs)
    np.testing.assert_array_equal(a.shares, b.shares)
    np.testing.assert_array_equal(a.train_client, b.train_client)
    np.testing.assert_array_equal(a.test_client, b.test_client)
    assert not np.array_equal(a.train_client, c.train_client)


def test_train_split_does_not_depend_on_test_set():
    train_labels, train_domains = _dataset(1, 10, 100, seed=1)
    runs = []
    for test_per_cell in (5, 50):
        test_labels, test_domains = _dataset(1, 10, test_per_cell, seed=2)
        runs.append(
            partition(
                "dirichlet",
                train_labels=train_labels,
                train_domains=train_domains,
                test_labels=test_labels,
                test_domains=test_domains,
                num_classes=10,
                num_domains=1,
                num_clients=5,
                params=PartitionParams(),
                seed=3,
            )
        )
    np.testing.assert_array_equal(runs[0].train_client, runs[1].train_client)


@pytest.mark.parametrize("name", ["dirichlet", "pathological", "pachinko"])
def test_train_and_test_class_proportions_match(name):
    kwargs = {"num_classes": 20, "coarse_of_class": COARSE} if name == "pachinko" else {}
    num_classes = kwargs.get("num_classes", 10)
    part, (train_labels, _), (test_labels, _) = _run(
        name, num_clients=5, train_per_cell=400, test_per_cell=200, **kwargs
    )
    train = _counts(part.train_client, train_labels, 5, num_classes)
    test = _counts(part.test_client, test_labels, 5, num_classes)
    # Each client gets the same fraction of every class in both sets, so counts scale by 200/400 up to
    # floor rounding (at most one sample per cell in each set: 1 + 1/2).
    assert np.abs(test - train / 2).max() <= 1.5


# --- split_by_shares ----------------------------------------------------------------------------------


def test_split_by_shares_chunk_sizes_by_hand():
    labels = np.zeros(10, dtype=np.int64)
    client = split_by_shares(labels, labels, np.array([[[0.5, 0.3, 0.2]]]), np.random.default_rng(0))
    assert np.bincount(client).tolist() == [5, 3, 2]


def test_split_by_shares_floors_boundaries_and_cells_are_independent():
    # cell (0,0): 7 samples, shares 1/3 each -> boundaries floor(7/3)=2, floor(14/3)=4, 7 -> sizes 2, 2, 3
    # (which client gets the 3 depends on the per-cell cut order); cell (0,1): all 4 to client 1
    labels = np.array([0] * 7 + [1] * 4)
    shares = np.array([[[1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]]])
    client = split_by_shares(np.zeros(11, dtype=np.int64), labels, shares, np.random.default_rng(0))
    assert sorted(np.bincount(client[:7], minlength=3).tolist()) == [2, 2, 3]
    assert client[7:].tolist() == [1, 1, 1, 1]


def test_split_by_shares_spreads_rounding_losses_over_clients():
    # 30 identical cells of 40 samples over 1000 equal shares: cutting each cell on its own would give all
    # samples to the same 40 clients; carrying the rounding across cells gives every client 1 or 2 (1.2 each).
    domains, labels = np.zeros(1200, dtype=np.int64), np.repeat(np.arange(30), 40)
    shares = np.full((1, 30, 1000), 1 / 1000)
    client = split_by_shares(domains, labels, shares, np.random.default_rng(0))
    assert (client >= 0).all()
    assert sorted(set(np.bincount(client, minlength=1000).tolist())) == [1, 2]


def test_split_by_shares_never_gives_samples_to_a_zero_share():
    # cumsum([0.1] * 10) ends at 0.9999999999999999, so floor(.. * 10) = 9: the remaining sample must go
    # to a client with a share, never to client 10 whose share is 0 (wherever the cut order puts it).
    labels = np.zeros(10, dtype=np.int64)
    client = split_by_shares(labels, labels, np.array([[[0.1] * 10 + [0.0]]]), np.random.default_rng(0))
    for seed in range(20):
        client = split_by_shares(labels, labels, np.array([[[0.1] * 10 + [0.0]]]), np.random.default_rng(seed))
        counts = np.bincount(client, minlength=11)
        assert counts[10] == 0 and counts.sum() == 10 and counts.max() <= 2


def test_split_by_shares_zero_row_leaves_samples_unassigned():
    labels = np.array([0, 0, 1, 1, 1])
    client = split_by_shares(
        np.zeros(5, dtype=np.int64), labels, np.array([[[0.5, 0.5], [0.0, 0.0]]]), np.random.default_rng(0)
    )
    assert sorted(client[:2].tolist()) == [0, 1] and client[2:].tolist() == [-1, -1, -1]


def test_split_by_shares_shuffles_within_cell():
    labels = np.zeros(100, dtype=np.int64)
    client = split_by_shares(labels, labels, np.array([[[0.5, 0.5]]]), np.random.default_rng(0))
    assert not np.array_equal(client, np.repeat([0, 1], 50))  # not simply the first half to client 0


# --- iid ----------------------------------------------------------------------------------------------


def test_iid_equal_shares_and_sizes():
    part, (labels, _), _ = _run("iid", num_clients=7, num_domains=2, train_per_cell=103)
    np.testing.assert_allclose(part.shares, 1 / 7)
    sizes = np.bincount(part.train_client, minlength=7)
    assert sizes.max() - sizes.min() <= 2 * 10  # at most one sample per cell
    counts = _counts(part.train_client, labels, 7, 10)
    assert counts.min() >= 2 * (103 // 7)  # every class, from both domains, at every client


# --- pathological -------------------------------------------------------------------------------------


@pytest.mark.parametrize("s, num_clients", [(2, 10), (3, 20), (1, 10), (10, 4)])
def test_pathological_classes_per_client_and_holders(s, num_clients):
    part, (labels, _), _ = _run("pathological", s=s, num_clients=num_clients)
    held = part.shares[0] > 0  # [C, M]
    assert (held.sum(axis=0) == s).all()  # each client holds exactly s classes
    assert (held.sum(axis=1) == s * num_clients // 10).all()  # each class held by s*M/C clients
    counts = _counts(part.train_client, labels, num_clients, 10)
    np.testing.assert_array_equal(counts > 0, held.T)
    k = s * num_clients // 10
    lo, hi = 0.4 / (0.4 + 0.6 * (k - 1)), 0.6 / (0.6 + 0.4 * (k - 1))
    holder_shares = part.shares[0][held]
    assert holder_shares.min() >= lo - 1e-12 and holder_shares.max() <= hi + 1e-12
    if k > 1:
        assert len(np.unique(holder_shares)) > 1  # random, not equal shares


def test_pathological_uneven_holder_counts_differ_by_at_most_one():
    part, _, _ = _run("pathological", s=3, num_clients=7)  # 21 holdings over 10 classes
    holders = (part.shares[0] > 0).sum(axis=1)
    assert holders.sum() == 21 and holders.max() - holders.min() <= 1
    assert ((part.shares[0] > 0).sum(axis=0) == 3).all()


def test_pathological_too_few_holdings_leave_classes_unassigned(caplog):
    with caplog.at_level("WARNING", logger="raysim"):
        part, (labels, _), (test_labels, _) = _run("pathological", s=1, num_clients=4)  # 4 holdings, 10 classes
    assert "leaves 600 of 1000 training rows, and their classes' test rows, to no client" in caplog.text  # 6 x 100
    held_classes = np.flatnonzero(part.shares[0].sum(axis=1) > 0)
    assert len(held_classes) == 4 and (part.shares[0] > 0).sum(axis=0).tolist() == [1, 1, 1, 1]
    for client, y in ((part.train_client, labels), (part.test_client, test_labels)):
        np.testing.assert_array_equal(client >= 0, np.isin(y, held_classes))


@pytest.mark.parametrize("draw", [random_class_sets, ring_class_sets])
def test_class_sets_give_each_client_s_distinct_classes_and_each_class_its_share_of_holders(draw):
    held = draw(100, 100, 10, np.random.default_rng(0))  # SGPT's CIFAR-100 setting: 10 holders a class
    assert all(len(set(row)) == 10 for row in held.tolist())
    assert (np.bincount(held.ravel(), minlength=100) == 10).all()


def test_random_class_sets_vary_across_clients_where_a_ring_repeats_in_blocks():
    """SGPT App. E.1: "each client is randomly assigned s classes ... the combination varies across clients"."""
    distinct = {
        draw: len({frozenset(row) for row in draw(100, 100, 10, np.random.default_rng(0)).tolist()})
        for draw in (random_class_sets, ring_class_sets)
    }
    assert distinct[ring_class_sets] == 10 and distinct[random_class_sets] > 90


def test_pathological_same_shares_in_every_domain():
    part, _, _ = _run("pathological", num_domains=3)
    np.testing.assert_array_equal(part.shares[0], part.shares[2])


# --- dirichlet ----------------------------------------------------------------------------------------


def test_dirichlet_large_alpha_is_close_to_uniform():
    part, _, _ = _run("dirichlet", alpha=1e4)
    np.testing.assert_allclose(part.shares, 0.1, atol=0.01)


def test_dirichlet_small_alpha_is_concentrated():
    part, _, _ = _run("dirichlet", alpha=0.05, num_clients=10, train_per_cell=1000, min_train_samples=0)
    top = part.shares[0].max(axis=1)  # largest client share per class
    assert np.median(top) > 0.7  # uniform would be 0.1


def test_dirichlet_redraws_until_every_client_has_enough():
    part, (labels, _), _ = _run("dirichlet", alpha=0.3, num_clients=10, min_train_samples=50)
    assert np.bincount(part.train_client, minlength=10).min() >= 50


def test_dirichlet_gives_up_after_redraws():
    with pytest.raises(ConfigError, match="fewer clients") as err:
        _run("dirichlet", alpha=0.01, num_clients=30, train_per_cell=3, min_train_samples=1)
    assert "\n" not in str(err.value) and "alpha" in str(err.value)


# --- pachinko -----------------------------------------------------------------------------------------


def test_pachinko_needs_coarse_labels():
    with pytest.raises(ConfigError, match="coarse") as err:
        _run("pachinko", num_classes=20)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="coarse"):
        _run("pachinko", num_classes=20, coarse_of_class=np.arange(10))


def test_pachinko_small_beta_concentrates_clients_on_few_coarse_labels():
    def top_coarse_mass(beta):
        part, (labels, _), _ = _run(
            "pachinko",
            num_classes=20,
            coarse_of_class=COARSE,
            beta=beta,
            num_clients=20,
            train_per_cell=500,
            min_train_samples=0,
        )
        counts = _counts(part.train_client, labels, 20, 20)
        coarse = np.stack([counts[:, k == COARSE].sum(axis=1) for k in range(5)], axis=1)  # [M, 5]
        return (coarse.max(axis=1) / np.maximum(coarse.sum(axis=1), 1)).mean()

    assert top_coarse_mass(0.05) > 0.6  # mostly one coarse label per client
    assert top_coarse_mass(100.0) < 0.35  # close to the even 1/5


def test_proportional_pachinko_fine_labels_within_coarse_follow_beta_fine():
    part, _, _ = _run(
        "pachinko", num_classes=20, coarse_of_class=COARSE, beta_fine=1e4, num_clients=5, pachinko="proportional"
    )
    # With a huge beta_fine, the four fine classes of a coarse label get the same client proportions.
    for k in range(5):
        block = part.shares[0, k == COARSE]
        np.testing.assert_allclose(block, block[:1].repeat(4, axis=0), rtol=0.05, atol=1e-3)


def _pachinko_on(labels, domains, coarse_of_class, num_clients, beta, seed):
    """pachinko (reddi) over the given rows, the same rows standing for the test set."""
    return partition(
        "pachinko",
        train_labels=labels,
        train_domains=domains,
        test_labels=labels,
        test_domains=domains,
        num_classes=len(coarse_of_class),
        num_domains=int(domains.max()) + 1,
        num_clients=num_clients,
        params=PartitionParams(beta=beta),
        seed=seed,
        coarse_of_class=coarse_of_class,
    )


@pytest.mark.parametrize("seed", range(5))
def test_reddi_pachinko_gives_every_client_n_over_m_rows_and_a_label_leaves_the_draw_when_it_runs_out(seed):
    """Two coarse labels of one class each, 2 and 8 rows, two clients of 5 rows: with beta 1e-3 a client's coarse
    multinomial is all but one-hot, so the first client often wants class 0's rows six times over; it gets its 2
    and then draws class 1, and the second client takes what is left. Every row is dealt, each to one client."""
    labels = np.repeat([0, 1], [2, 8])
    part = _pachinko_on(labels, np.zeros(10, dtype=np.int64), np.array([0, 1]), 2, beta=1e-3, seed=seed)
    counts = _counts(part.train_client, labels, 2, 2)
    assert counts.sum(axis=1).tolist() == [5, 5] and counts.sum(axis=0).tolist() == [2, 8]
    np.testing.assert_allclose(part.shares[0], counts.T / np.array([[2], [8]]))  # each class's rows as drawn


def test_reddi_pachinko_leaves_the_n_mod_m_rows_to_no_client_and_follows_beta_fine():
    part, (labels, _), _ = _run("pachinko", num_classes=20, coarse_of_class=COARSE, num_clients=7, beta_fine=1e4)
    sizes = np.bincount(part.train_client[part.train_client >= 0], minlength=7)
    assert sizes.tolist() == [2000 // 7] * 7 and (part.train_client < 0).sum() == 2000 % 7
    counts = _counts(part.train_client[part.train_client >= 0], labels[part.train_client >= 0], 7, 20)
    fine = counts[:, COARSE == 0] / np.maximum(counts[:, COARSE == 0].sum(axis=1, keepdims=True), 1)
    held = counts[:, COARSE == 0].sum(axis=1) >= 40  # clients with 40+ rows of coarse label 0: its 4 classes ~even
    assert held.any() and np.abs(fine[held] - 0.25).max() < 0.2


@pytest.mark.parametrize("seed", range(3))
def test_reddi_pachinko_deals_whole_rows_per_domain_so_clients_get_exactly_what_they_drew(seed):
    """Over several domains a class's drawn rows are dealt cell by cell in whole rows: each client holds exactly
    N // M rows, N % M rows stay with no client, and no cell deals more rows than it has."""
    rng = np.random.default_rng(seed)
    labels, domains = rng.integers(0, 20, 997), rng.integers(0, 10, 997)  # 200 cells of unequal sizes
    part = _pachinko_on(labels, domains, COARSE, 7, beta=0.1, seed=seed)
    assert np.bincount(part.train_client[part.train_client >= 0], minlength=7).tolist() == [997 // 7] * 7
    assert (part.train_client < 0).sum() == 997 % 7
    assert (part.shares.sum(axis=2) <= 1 + 1e-9).all()


# --- domains ------------------------------------------------------------------------------------------


def _clients_per_domain(num_domains, num_clients, dif):
    part, _, _ = _run("domains", num_domains=num_domains, num_clients=num_clients, dif=dif)
    return part, np.bincount(part.client_domain, minlength=num_domains)


def test_domains_geometric_counts():
    _, n = _clients_per_domain(5, 20, 10.0)
    assert n.sum() == 20 and n.min() >= 1
    assert n[0] == n.max() and (np.diff(n) <= 0).all()
    assert 8 <= n.max() / n.min() <= 12
    # For M=20, D=5 a ratio of exactly 10 is reachable (smallest 1, largest 10), so it must be chosen.
    assert n.max() / n.min() == 10


def test_domains_counts_follow_the_continuous_geometric_series():
    _, n = _clients_per_domain(5, 100, 10.0)
    assert n.sum() == 100 and n.max() / n.min() == 10  # e.g. 50 ... 5 reaches the ratio exactly
    ratios = 10.0 ** (-np.arange(5) / 4)
    ideal = 100 * ratios / ratios.sum()  # 46.4, 26.1, 14.7, 8.3, 4.6
    assert np.abs(n - ideal).max() <= 4


def test_domains_at_fedgcrs_totals_give_its_geometric_counts_in_its_domain_order():
    """FedGCR Table 3's clustering accuracies (18/22, 21/22 at DIF 10; 9/13, 12/13 at DIF 5) and its authors' code:
    round(r^k) clients, r = DIF^(1/4), the k-th most to the k-th domain of their order (Digit-Five: MNIST, USPS,
    SynthDigits, MNIST-M, SVHN)."""
    assert _clients_per_domain(5, 22, 10.0)[1].tolist() == [10, 6, 3, 2, 1]
    assert _clients_per_domain(5, 13, 5.0)[1].tolist() == [5, 3, 2, 2, 1]
    order = (0, 4, 3, 1, 2)  # raysim's digit-five ids: mnist, mnistm, svhn, syn, usps
    part, _, _ = _run("domains", num_domains=5, num_clients=22, dif=10.0, domain_order=order)
    assert np.bincount(part.client_domain, minlength=5).tolist() == [10, 2, 1, 3, 6]  # svhn the rarest


def test_domains_balanced_and_one_client_per_domain():
    assert _clients_per_domain(5, 20, 1.0)[1].tolist() == [4, 4, 4, 4, 4]
    assert _clients_per_domain(4, 4, 5.0)[1].tolist() == [1, 1, 1, 1]
    assert _clients_per_domain(3, 7, 1.0)[1].tolist() == [3, 2, 2]  # as balanced as 7 over 3 allows


def test_domains_clients_see_only_their_domain():
    part, (labels, domains), (test_labels, test_domains) = _run("domains", num_domains=4, num_clients=10, dif=3.0)
    assert part.client_domain.shape == (10,) and part.client_domain.dtype == np.int64
    np.testing.assert_array_equal(part.client_domain[part.train_client], domains)
    np.testing.assert_array_equal(part.client_domain[part.test_client], test_domains)
    # A domain's data is split equally among its clients: sizes within a domain differ by at most
    # one sample per class.
    sizes = np.bincount(part.train_client, minlength=10)
    for d in range(4):
        own = sizes[part.client_domain == d]
        assert own.max() - own.min() <= 10
        assert own.sum() == 1000  # 10 classes x 100 samples of this domain


def test_domains_geometric_sizes_shrink_each_domain_and_grow_its_clients_as_fedgcrs_code():
    """DIF 4 over 3 domains, r = 2, 7 clients (4, 2, 1), 60 training rows per (domain, class): the k-th domain
    keeps 60 / 2^k rows per class and its j-th client 2^j parts of them (fedgcr ``prepare_digit_uneven``): domain 0
    4, 8, 16, 32; domain 1 10, 20; domain 2 15. The test rows all stay, dealt equally among a domain's clients (60
    a domain: 15 each in domain 0, 30 in domain 1, 60 in domain 2), as near as one split gets to the authors' clients
    each evaluating on their domain's whole test set."""
    setting = {"num_classes": 2, "num_domains": 3, "num_clients": 7, "train_per_cell": 60, "dif": 4.0}
    part, (labels, _), _ = _run("domains", **setting, test_per_cell=30, domain_sizes="geometric")
    assert np.bincount(part.client_domain).tolist() == [4, 2, 1]
    per_class = [np.bincount(labels[part.train_client == i], minlength=2).tolist() for i in range(7)]
    assert per_class == [[4, 4], [8, 8], [16, 16], [32, 32], [10, 10], [20, 20], [15, 15]]
    assert (part.train_client < 0).sum() == 2 * (30 + 45)  # domain 1 drops half its rows, domain 2 three quarters
    assert np.bincount(part.test_client, minlength=7).tolist() == [15, 15, 15, 15, 30, 30, 60]
    reordered, _, _ = _run("domains", **setting, domain_sizes="geometric", domain_order=(2, 1, 0))
    assert np.bincount(reordered.client_domain).tolist() == [1, 2, 4]
    assert np.bincount(reordered.train_client[reordered.train_client >= 0]).tolist()[:3] == [30, 20, 40]


@pytest.mark.parametrize(
    "name, params, digest",
    [
        ("iid", {}, "48f164f2326c"),
        ("dirichlet", {"alpha": 0.3}, "005447662792"),
        ("pathological", {"s": 3}, "bb8a9cd548c7"),
        ("pachinko", {"beta": 0.5, "coarse_of_class": np.arange(10) // 2, "pachinko": "proportional"}, "09816eeae994"),
        ("pachinko", {"beta": 0.5, "coarse_of_class": np.arange(10) // 2}, "aefbd8180c11"),  # reddi, since e10dede
        ("domains", {"num_domains": 4, "dif": 3.0}, "e26b57d4bc6b"),
    ],
)
def test_every_default_partition_deals_the_rows_it_always_dealt(name, params, digest):
    """Pinned at 63596b4 (checked equal to it after the geometric domain sizes came): a change that moves a default
    partition's rows changes every published figure on it, so it must be an option with a new config hash."""
    part, _, _ = _run(name, **params)
    assert hashlib.sha256(part.train_client.tobytes() + part.test_client.tobytes()).hexdigest()[:12] == digest


def test_domains_geometric_sizes_round_each_domains_total_not_each_cell():
    """DIF 10 over 2 domains (r = 10; one client each), 3 rows per (domain, class), 10 classes: the second domain
    keeps a tenth, 0.3 rows a class, which rounds to 0 in every cell but must come to 3 rows in all."""
    part, _, _ = _run("domains", num_domains=2, num_clients=2, train_per_cell=3, dif=10.0, domain_sizes="geometric")
    assert np.bincount(part.train_client[part.train_client >= 0]).tolist() == [30, 3]


def test_domains_geometric_sizes_at_dif_1_are_the_full_split():
    full, _, _ = _run("domains", num_domains=4, num_clients=8, dif=1.0)
    geometric, _, _ = _run("domains", num_domains=4, num_clients=8, dif=1.0, domain_sizes="geometric")
    np.testing.assert_array_equal(full.train_client, geometric.train_client)


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kwargs, needle",
    [
        ("nope", {}, "nope"),
        ("pathological", {"s": 12}, "s=12"),
        ("pathological", {"s": 0}, "s=0"),
        ("dirichlet", {"alpha": 0.0}, "alpha=0.0"),
        ("dirichlet", {"alpha": -1.0}, "alpha=-1.0"),
        ("pachinko", {"beta": 0.0, "num_classes": 20, "coarse_of_class": COARSE}, "beta=0.0"),
        ("pachinko", {"beta_fine": -2.0, "num_classes": 20, "coarse_of_class": COARSE}, "beta_fine=-2.0"),
        ("domains", {"dif": 0.5, "num_domains": 3}, "dif=0.5"),
        ("iid", {"num_clients": 0}, "num_clients=0"),
        ("domains", {"num_domains": 1}, "has 1"),
        ("domains", {"num_domains": 4, "num_clients": 3}, "num_clients=3"),
        ("iid", {"num_clients": 2000}, "num_clients=2000"),
        ("dirichlet", {"num_clients": 10**20}, "need at least 1 training row each"),  # refused before any draw
        ("pathological", {"num_clients": 600, "train_per_cell": 50}, "num_clients=600"),  # 500 rows < 600 clients
    ],
)
def test_config_errors_are_one_line_and_name_the_value(name, kwargs, needle):
    with pytest.raises(ConfigError) as err:
        _run(name, **kwargs)
    message = str(err.value)
    assert "\n" not in message and needle in message


def test_s_too_large_message_says_how_to_fix():
    with pytest.raises(ConfigError, match=r"s=12 is larger than the number of classes \(10\); choose s <= 10"):
        _run("pathological", s=12)


def test_unknown_name_lists_valid_partitions():
    with pytest.raises(ConfigError, match="dirichlet"):
        _run("nope")


# --- summary and plot ---------------------------------------------------------------------------------


def test_partition_summary_matches_bincount():
    part, (labels, _), _ = _run("dirichlet", num_clients=6)
    summary = partition_summary(part.train_client, labels, 6, 10)
    counts = summary["counts"]
    assert counts.shape == (6, 10) and counts.dtype == np.int64
    np.testing.assert_array_equal(counts.sum(axis=1), np.bincount(part.train_client, minlength=6))
    for c in range(10):
        np.testing.assert_array_equal(counts[:, c], np.bincount(part.train_client[labels == c], minlength=6))
    sizes = np.bincount(part.train_client, minlength=6)
    classes = [len(np.unique(labels[part.train_client == i])) for i in range(6)]
    assert summary["clients"] == 6
    assert summary["size_min"] == sizes.min() and summary["size_max"] == sizes.max()
    assert summary["size_mean"] == pytest.approx(len(labels) / 6)
    assert summary["classes_per_client_min"] == min(classes)
    assert summary["classes_per_client_max"] == max(classes)
    assert summary["classes_per_client_mean"] == pytest.approx(np.mean(classes))


def test_partition_summary_pathological_by_hand():
    # client 0: classes 0 and 1; client 1: class 2 only -> 2 and 1 classes, sizes 3 and 2
    summary = partition_summary(np.array([0, 0, 0, 1, 1]), np.array([0, 1, 1, 2, 2]), 2, 3)
    assert summary["counts"].tolist() == [[1, 2, 0], [0, 0, 2]]
    assert (summary["classes_per_client_min"], summary["classes_per_client_max"]) == (1, 2)
    assert (summary["size_min"], summary["size_max"], summary["size_mean"]) == (2, 3, 2.5)


@pytest.mark.parametrize("num_clients", [5, 250])
def test_plot_partition_writes_png(tmp_path, num_clients):
    labels = np.arange(1000) % 10
    client = np.arange(1000) % num_clients
    path = tmp_path / "partition.png"
    plot_partition(client, labels, num_clients, 10, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_partition_artifacts_are_the_summary_of_the_shards_their_counts_and_their_picture():
    from safetensors.numpy import load

    shards = prepare_shards(smoke_config("fedavg"))
    summary, table, picture = partition_artifacts(shards)
    table = load(table)
    counts = table["train_counts"]
    assert counts.dtype == np.int32 and counts.shape == (shards.num_clients, shards.info.num_classes)
    assert counts.sum(axis=1).tolist() == shards.train_sizes().tolist()
    assert table["test_sizes"].tolist() == shards.test_sizes().tolist()
    train_rows = shards.labels[: shards.train_offsets[-1]]
    assert (
        counts[1].tolist()
        == np.bincount(train_rows[shards.train_offsets[1] : shards.train_offsets[2]], minlength=10).tolist()
    )
    assert summary.pop("unseen_clients") == list(shards.unseen)
    train_client = np.repeat(np.arange(shards.num_clients), shards.train_sizes())
    expected = partition_summary(train_client, shards.labels[: len(train_client)], len(counts), counts.shape[1])
    expected.pop("counts")
    assert summary == expected
    assert picture[:8] == b"\x89PNG\r\n\x1a\n"


def test_held_out_clients_without_types_are_a_plain_draw_without_replacement():
    """The draw every untyped partition has always had (published runs keep their unseen clients)."""
    drawn = held_out_clients(10, 100, None, np.random.default_rng(4))
    assert drawn == tuple(sorted(np.random.default_rng(4).choice(100, size=10, replace=False).tolist()))


def test_held_out_clients_leave_every_client_type_a_training_client():
    """DIF 10 over 22 clients (10, 6, 3, 2, 1): the single client of the rarest type never is held out, any other
    client may be, and at most 22 - 5 clients can go, one of each type staying."""
    client_domain = np.repeat(np.arange(5), [10, 6, 3, 2, 1])
    held = [held_out_clients(3, 22, client_domain, np.random.default_rng(seed)) for seed in range(300)]
    assert all(len(set(h)) == 3 for h in held)
    assert set().union(*held) == set(range(21))  # all but client 21, the rarest type's only one
    most = held_out_clients(17, 22, client_domain, np.random.default_rng(0))
    assert np.bincount(np.delete(client_domain, most), minlength=5).tolist() == [1, 1, 1, 1, 1]
    with pytest.raises(ConfigError, match="holds out 18 of 22 clients, but each of the 5 client types keeps one"):
        held_out_clients(18, 22, client_domain, np.random.default_rng(0))
