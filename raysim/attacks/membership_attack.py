"""Membership inference put together: the attacked model (a run's final global model, or each client's own), the rows
it scores (the chosen clients' training rows are the members, their test rows, of the same distribution and never
trained on, the non-members), and for offline LiRA the shadow runs that never saw those rows
(:mod:`raysim.attacks.shadows`). The rows are read only here, to score the model on them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from raysim.attacks.harness import attacker_model
from raysim.attacks.lira import offline_scores
from raysim.attacks.membership import MembershipROC, membership_roc, row_confidences, row_losses
from raysim.attacks.shadows import shadow_run
from raysim.base.errors import ConfigError
from raysim.config import Config
from raysim.core.messages import Tensors
from raysim.core.registry import get_method
from raysim.data.shards import ClientData, ShardStore

CPU = torch.device("cpu")


@dataclass
class Membership:
    """A membership attack on a model: its ROC, and how many member and non-member rows it scored."""

    roc: MembershipROC
    members: int
    non_members: int


def membership(
    config: Config, params: Tensors, shards: ShardStore, clients: list[int], states: dict[int, Tensors] | None = None
) -> Membership:
    """The loss-threshold attack against the model holding ``params``. With ``states`` (a personalised method's client
    states), each client's rows are scored under its own model (the method's ``eval_params``, as it is evaluated).
    ``shards`` with the method's cached features (:func:`raysim.engine.setup.initial_state`)."""
    refuse_split_learning(config)
    model, method = attacker_model(config, shards.info.num_classes, params)
    if states is None:
        members, non_members = _scored(model, method, shards, clients, row_losses)
    else:
        scored_rows = {"train": [np.zeros(0)], "test": [np.zeros(0)]}
        for client in clients:
            model.load_trainable(method.eval_params(params, states.get(client)))
            for split, rows in scored_rows.items():
                rows.append(row_losses(model, method, getattr(shards, split)(client), CPU))
        members, non_members = (np.concatenate(rows) for rows in scored_rows.values())
    _check_rows(clients, members, non_members)
    return Membership(membership_roc(-members, -non_members), len(members), len(non_members))


def lira(
    config: Config,
    params: Tensors,
    shards: ShardStore,
    clients: list[int],
    shadows: int,
    progress: Callable[[int, int], None] | None = None,
) -> Membership:
    """Offline LiRA (:mod:`raysim.attacks.lira`) against the global model holding ``params``: each row's confidence
    under it, tested against the row's confidences under ``shadows`` shadow runs that held ``clients`` out.
    ``progress(k, clients heard)`` is called as shadow ``k`` ends."""
    refuse_split_learning(config)
    model, method = attacker_model(config, shards.info.num_classes, params)
    members, non_members = _scored(model, method, shards, clients, row_confidences)
    _check_rows(clients, members, non_members)
    out = []
    for k in range(shadows):
        shadow = shadow_run(config, shards, clients, k)
        model, method = attacker_model(shadow.config, shards.info.num_classes, shadow.params)
        out.append(np.concatenate(_scored(model, method, shards, clients, row_confidences)))
        if progress is not None:
            progress(k, len(shadow.contributions))
    scores = offline_scores(np.concatenate([members, non_members]), np.stack(out))
    roc = membership_roc(scores[: len(members)], scores[len(members) :])
    return Membership(roc, len(members), len(non_members))


def refuse_split_learning(config: Config) -> None:
    """One line for a split-learning run: its global state holds no whole model to attack."""
    if get_method(config.method).split_learning:
        raise ConfigError(
            f"{config.method} is split learning: its model lives split between the server and the clients, and its "
            "global state holds no whole model to attack"
        )


def _scored(model, method, shards: ShardStore, clients: list[int], statistic) -> tuple[np.ndarray, np.ndarray]:
    """``statistic`` (:func:`~raysim.attacks.membership.row_losses` or ``row_confidences``) of the clients' training
    rows and of their test rows under ``model``."""
    train = ClientData.concat([shards.train(c) for c in clients])
    test = ClientData.concat([shards.test(c) for c in clients])
    return statistic(model, method, train, CPU), statistic(model, method, test, CPU)


def _check_rows(clients: list[int], members: np.ndarray, non_members: np.ndarray) -> None:
    if not len(members) or not len(non_members):
        raise ConfigError(
            f"the {len(clients)} chosen clients hold {len(members)} training and {len(non_members)} test rows; "
            "membership inference needs both: pass --clients that hold both"
        )
