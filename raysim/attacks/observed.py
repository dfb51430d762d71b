"""The gradient a client's update reveals, and the messages it can be read off.

One local step of SGD with learning rate eta and weight decay lambda from the broadcast tensors w0 sends
w1 = w0 - eta (g + lambda w0) (torch's SGD: the first step's momentum buffer is that gradient itself), so the server
recovers the client's batch gradient exactly, g = (w0 - w1) / eta - lambda w0: the setting of Inverting Gradients
(Geiping et al., "Inverting Gradients - How easy is it to break privacy in federated learning?", NeurIPS 2020,
Section 4), which the server reads with the broadcast it sent and the run's public training settings. Under
record-level DP the same arithmetic gives the clipped, noised gradient the client stepped with.
"""

from __future__ import annotations

from raysim.base.errors import ConfigError
from raysim.config import Config
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.registry import get_method


def refuse_unless_one_sgd_step(config: Config) -> None:
    """Refuse (one line) a run whose clients do not send a parameter update of plain SGD steps to a server that sees
    it: split learning (activations every step), secure aggregation (only the cohort's sum), AdamW (its first step
    is the gradient's sign, scaled) and several local epochs."""
    method = config.method
    if get_method(method).split_learning:
        raise ConfigError(
            f"{method} is split learning: its clients send cut-layer activations every local step, not an update of "
            "their parameters; inverting attacks a parameter update (fedavg, fedvpt)"
        )
    if config.privacy.secure_aggregation:
        raise ConfigError(
            "under privacy.secure_aggregation the server sees only the cohort's sum, not a client's update; attack "
            "a run without it"
        )
    if config.train.optimizer != "sgd":
        raise ConfigError(
            f"inverting reads the gradient off one SGD step, and the run used train.optimizer="
            f"{config.train.optimizer}; attack a run with --set train.optimizer=sgd"
        )
    if config.train.local_epochs != 1:
        raise ConfigError(
            f"inverting attacks one local step, and the run's clients trained {config.train.local_epochs} epochs; "
            "attack a run with --local-epochs 1"
        )


def observed_gradient(update: ClientUpdate, broadcast: Broadcast, config: Config) -> Tensors:
    """The batch gradient of every tensor in ``update``, read off its one SGD step from ``broadcast``'s tensors.

    Raises :class:`ConfigError` (one line) for an update of more than one local step or of part of the tensors (a
    capacity tier's rows)."""
    steps = int(update.metrics.get("steps", 0))
    if steps != 1:
        raise ConfigError(
            f"client {update.client_id} took {steps} local steps on its {update.num_samples} rows; inverting attacks "
            f"one step (a run with train.batch_size at least the client's rows)"
        )
    if update.trained:
        raise ConfigError(
            f"client {update.client_id} trained part of its tensors (a capacity tier); attack one of 'all'"
        )
    eta, decay = config.train.lr, config.train.weight_decay
    start = broadcast.params
    return {name: (start[name] - sent) / eta - decay * start[name] for name, sent in update.params.items()}
