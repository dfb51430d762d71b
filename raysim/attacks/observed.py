"""The gradient a client's update reveals, and the messages it can be read off.

One local step of SGD with learning rate eta and weight decay lambda from the broadcast tensors w0 sends
w1 = w0 - eta (g + lambda w0) (torch's SGD: the first step's momentum buffer is that gradient itself), so the server
recovers the client's batch gradient exactly, g = (w0 - w1) / eta - lambda w0: the setting of Inverting Gradients
(Geiping et al., "Inverting Gradients - How easy is it to break privacy in federated learning?", NeurIPS 2020,
Section 4), which the server reads with the broadcast it sent and the run's public training settings. Under
record-level DP the same arithmetic gives the clipped, noised gradient the client stepped with. An update of several
steps is the difference w_T - w_0 itself (:func:`observed_update`), which :mod:`raysim.attacks.local_epoch` matches.
"""

from __future__ import annotations

from raysim.base.errors import ConfigError
from raysim.config import Config
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.registry import get_method


def refuse_unless_sgd_updates(config: Config, attack: str = "inverting") -> None:
    """Refuse (one line, naming the ``attack``) a run whose clients do not send a parameter update of plain SGD steps
    to a server that sees it: split learning (activations every step), secure aggregation (only the cohort's sum),
    AdamW (its steps depend on moments the server never sees), and record-level DP over several local epochs
    (clipped, noised steps the simulation of local training does not model)."""
    method = config.method
    if get_method(method).split_learning:
        raise ConfigError(
            f"{method} is split learning: its clients send cut-layer activations every local step, not an update of "
            f"their parameters; {attack} attacks a parameter update (fedavg, fedvpt)"
        )
    if config.privacy.secure_aggregation:
        raise ConfigError(
            "under privacy.secure_aggregation the server sees only the cohort's sum, not a client's update; attack "
            "a run without it"
        )
    if config.train.optimizer != "sgd":
        raise ConfigError(
            f"{attack} reads the gradient off SGD steps, and the run used train.optimizer="
            f"{config.train.optimizer}; attack a run with --set train.optimizer=sgd"
        )
    if config.privacy.mode == "record" and config.train.local_epochs != 1:
        raise ConfigError(
            f"under privacy.mode=record the {config.train.local_epochs} local epochs' steps are clipped and noised, "
            "which the simulated local training does not model; attack a run with --local-epochs 1 and one step"
        )


def observed_gradient(update: ClientUpdate, broadcast: Broadcast, config: Config) -> Tensors:
    """The batch gradient of every tensor in ``update``, read off its one SGD step from ``broadcast``'s tensors.

    Raises :class:`ConfigError` (one line) for an update of more than one local step or of part of the tensors (a
    capacity tier's rows)."""
    steps = int(update.metrics.get("steps", 0))
    if steps != 1:
        raise ConfigError(
            f"client {update.client_id} took {steps} local steps on its {update.num_samples} rows; april reads one "
            f"step's gradient (a run with train.batch_size at least the client's rows and --local-epochs 1)"
        )
    refuse_tiers(update)
    eta, decay = config.train.lr, config.train.weight_decay
    start = broadcast.params
    return {name: (start[name] - sent) / eta - decay * start[name] for name, sent in update.params.items()}


def observed_update(update: ClientUpdate, broadcast: Broadcast, config: Config) -> Tensors:
    """w_T - w_0 of every tensor in ``update``: what its local training moved, from ``broadcast``'s tensors. Refused
    (one line) under record-level DP, whose noised steps no simulated training reproduces: one step's gradient is
    read exactly by :func:`observed_gradient` instead."""
    refuse_tiers(update)
    if config.privacy.mode == "record":
        raise ConfigError(
            f"client {update.client_id} took {update.metrics.get('steps', 0):g} DP-SGD steps; under "
            "privacy.mode=record inverting attacks one step (a run with train.batch_size at least the client's rows)"
        )
    return {name: sent - broadcast.params[name] for name, sent in update.params.items()}


def refuse_tiers(update: ClientUpdate) -> None:
    """One line for an update of part of the tensors (a capacity tier's rows), which no attack here models."""
    if update.trained:
        raise ConfigError(
            f"client {update.client_id} trained part of its tensors (a capacity tier); attack one of 'all'"
        )
