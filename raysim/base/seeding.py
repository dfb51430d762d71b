"""Seeds handed out from the centre: every random draw is a pure function of (run seed, purpose, keys).

Nothing reads global RNG state, so results do not depend on which worker ran a client or in what order
(pfl-research's ``CentralContext`` idea). Each purpose is a named constant; its value is part of the seed, so
the values never change (a changed value changes every number of every run).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Purpose(IntEnum):
    """What a derived seed is for, and the keys it takes."""

    SAMPLE = 0  # the clients of a round: (round,)
    CLIENT = 1  # a client's local work: (round, client)
    INIT = 2  # model initialisation: (Init part,)
    PARTITION = 3  # the split of the data over clients: ()
    UNSEEN = 4  # the held-out clients: ()
    SERVER = 5  # a server-side draw for a client's contribution (FedVZ's SPSA direction): (round, client)
    BLOCK = 6  # a sub-stream of a client's seed (SGPT's BCD blocks, Ditto's personal pass): (number,)
    CLUSTER = 7  # the server's clustering (FedGCR's Gaussian mixture): ()
    EVAL = 8  # the clients evaluated when a large population is evaluated on a sample: ()
    SYSTEMS = 9  # the clients' devices drawn from distributions: (field,)
    DROPOUT = 10  # which selected clients fail mid-round: (round,)
    PRIVACY = 11  # differential privacy's noise: the server's (round,), a client's DP-SGD from its seed ()
    COMPRESSION = 12  # a client's encoding of its update (QSGD's rounding, rand-k's coordinates): (round, client)
    DISPATCH = 13  # asynchronous mode's choice of the next client to train: (dispatch,)
    DISPATCHED = 14  # asynchronous mode's local work of a dispatched client: (dispatch, client)
    DOWNLINK = 15  # the server's encoding of its model's update (compression.downlink): (round,)
    SHADOW = 16  # an attack's shadow runs: a shadow's run seed (shadow,), the clients it attacks ()


class Init(IntEnum):
    """The parts of the model built from :attr:`Purpose.INIT` seeds."""

    BACKBONE = 0
    WRAPPER = 1  # the new classifier and the stored prompts
    GLOBAL_STATE = 2  # the generator a method's ``init_global`` gets
    EXTRAS = 3  # the generator a method's own parameters are drawn from


def derive_seed(run_seed: int, purpose: Purpose, *keys: int) -> int:
    """A 63-bit seed for ``purpose`` at ``keys`` (e.g. round, client id), independent of call order."""
    high, low = np.random.SeedSequence([run_seed, int(purpose), *keys]).generate_state(2)
    return (int(high) << 31) ^ int(low)


def rng(run_seed: int, purpose: Purpose, *keys: int) -> np.random.Generator:
    """A numpy generator for ``purpose`` at ``keys``."""
    return np.random.default_rng(derive_seed(run_seed, purpose, *keys))


def sample_clients(run_seed: int, round: int, candidates: list[int], m: int, poisson: bool = False) -> list[int]:
    """The round's participants, sorted: m of the candidates uniformly without replacement, or with ``poisson`` each
    candidate independently with probability m / len(candidates) (a cohort of m on average)."""
    draws = rng(run_seed, Purpose.SAMPLE, round)
    if poisson:
        return [c for c, u in zip(candidates, draws.random(len(candidates))) if u < m / len(candidates)]
    chosen = draws.choice(len(candidates), size=m, replace=False)
    return sorted(candidates[i] for i in chosen)


def evaluated_clients(fed, seen: list[int], unseen: list[int]) -> tuple[list[int], list[int]]:
    """The (seen, unseen) clients evaluated on evaluated rounds: all, or for a population over
    ``federation.eval_clients`` a fixed sample of that many drawn once from the run seed, seen and held-out clients
    alike (the global model's accuracy is then that of the sample's test rows)."""
    if not fed.evaluates_a_sample:
        return seen, unseen
    everyone = seen + unseen
    chosen = set(rng(fed.seed, Purpose.EVAL).choice(everyone, size=fed.eval_clients, replace=False).tolist())
    return [c for c in seen if c in chosen], [c for c in unseen if c in chosen]
