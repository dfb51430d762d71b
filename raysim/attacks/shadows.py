"""Shadow runs for offline LiRA (:mod:`raysim.attacks.lira`): the attacked run's configuration replayed in this
process on the run's own partition, with the attacked clients held out (they never train) and another run seed for
every other draw (the initialisation, the rounds' clients, the batches), so that each shadow is a model the run could
have ended with had it never seen the attacked rows. Shadow ``k``'s seed derives from the run seed
(:attr:`~raysim.base.seeding.Purpose.SHADOW`), so the same attack on the same run trains the same shadows."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from raysim.attacks.capture import replayed
from raysim.base.errors import ConfigError
from raysim.base.seeding import Purpose, derive_seed, rng
from raysim.config import Config
from raysim.core.messages import Tensors
from raysim.data.shards import ShardStore
from raysim.engine.setup import initial_state
from raysim.tracking.checkpoint import Checkpoint


@dataclass
class Shadow:
    """One shadow run: its configuration (the run's, with the shadow's seed), its final global parameters, and the
    clients whose updates its server used (never an attacked one)."""

    config: Config
    params: Tensors
    contributions: dict[int, int]


def shadow_seed(run_seed: int, k: int) -> int:
    """The run seed of shadow ``k`` of a run seeded ``run_seed``."""
    return derive_seed(run_seed, Purpose.SHADOW, k) % 2**31


def attacked_half(run_seed: int, heard: list[int]) -> list[int]:
    """The clients LiRA attacks by default: half of those the run heard (rounded down, at least one), drawn from the
    run seed; the shadows train on the rest of the population."""
    draws = rng(run_seed, Purpose.SHADOW).permutation(len(heard))
    return sorted(heard[i] for i in draws[: max(1, len(heard) // 2)])


def shadow_run(config: Config, shards: ShardStore, held_out: list[int], k: int) -> Shadow:
    """Shadow ``k`` of the run ``config`` describes (resolved, as :func:`raysim.engine.setup.initial_state` returns
    it), trained for all its rounds on the sequential backend on ``shards`` with ``held_out`` never training."""
    fed = config.federation
    unseen = tuple(sorted(set(shards.unseen) | set(held_out)))
    trainable = len(set(shards.seen_clients()) - set(held_out))
    if trainable < fed.clients_per_round:  # refused before the model's build
        raise ConfigError(
            f"holding the {len(held_out)} attacked clients out leaves the shadow runs {trainable} clients to train, "
            f"fewer than the run's {fed.clients_per_round} a round; attack fewer --clients"
        )
    config = dataclasses.replace(config, federation=dataclasses.replace(fed, seed=shadow_seed(fed.seed, k)))
    config, initial, _, shards = initial_state(config, shards)
    shards = dataclasses.replace(shards, unseen=unseen)
    with replayed(config, shards, Checkpoint(f"shadow-{k}", 0, config.to_dict(), initial, {}, "")) as simulation:
        for round in range(1, fed.rounds + 1):
            simulation.run_round(round)
        return Shadow(config, simulation.global_state().params, dict(simulation.contributions))
