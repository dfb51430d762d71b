from raysim.base.seeding import Purpose, derive_seed, rng, sample_clients


def test_derived_seeds_depend_only_on_their_keys():
    first = [derive_seed(7, Purpose.CLIENT, r, c) for r in range(3) for c in range(4)]
    again = [derive_seed(7, Purpose.CLIENT, r, c) for r in reversed(range(3)) for c in reversed(range(4))][::-1]
    assert first == again
    assert len(set(first)) == len(first)
    assert derive_seed(7, Purpose.CLIENT, 1, 2) != derive_seed(8, Purpose.CLIENT, 1, 2)
    assert derive_seed(7, Purpose.CLIENT, 1, 2) != derive_seed(7, Purpose.SAMPLE, 1, 2)
    assert all(0 <= s < 2**63 for s in first)


def test_sample_clients_is_sorted_unique_and_reproducible():
    candidates = list(range(0, 200, 2))
    chosen = sample_clients(3, 5, candidates, 10)
    assert chosen == sorted(chosen) and len(set(chosen)) == 10
    assert set(chosen) <= set(candidates)
    assert chosen == sample_clients(3, 5, candidates, 10)
    assert chosen != sample_clients(3, 6, candidates, 10)


def test_rng_streams_are_independent_of_global_state():
    import numpy as np

    np.random.seed(1)
    a = rng(0, Purpose.UNSEEN).random(3)
    np.random.seed(2)
    assert (a == rng(0, Purpose.UNSEEN).random(3)).all()


def test_purpose_values_never_change():
    """A purpose's value is part of every seed derived for it: changing one changes every number of every run."""
    assert [(p.name, p.value) for p in Purpose] == [
        ("SAMPLE", 0),
        ("CLIENT", 1),
        ("INIT", 2),
        ("PARTITION", 3),
        ("UNSEEN", 4),
        ("SERVER", 5),
        ("BLOCK", 6),
        ("CLUSTER", 7),
        ("EVAL", 8),
        ("SYSTEMS", 9),
        ("DROPOUT", 10),
        ("PRIVACY", 11),
        ("COMPRESSION", 12),
        ("DISPATCH", 13),
        ("DISPATCHED", 14),
        ("DOWNLINK", 15),
        ("SHADOW", 16),
    ]
