"""Replay a run's configuration in this process and capture exactly what the server received from chosen clients in
a chosen round: their screened :class:`~raysim.core.messages.ClientUpdate` (every tensor of the typed message,
decoded as the server decodes it under compression) and the broadcast they trained from; under split learning also,
for each of their local steps, the smashed features they sent to the server, the encoder's output the server sent
back and the gradient in that output their tails returned.

Every random draw of a run derives from its seed (docs/explanation/determinism.md), so rounds 1 .. r of the replay
are those of the recorded run, bit for bit on the same kind of device; the clients run one by one on the sequential
backend, which computes what a pool of Ray workers computes. Nothing here reads a client's data: the clients train
on theirs, as in the run, and the capture keeps only their messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from raysim.attacks.progress import steps
from raysim.base.errors import ConfigError
from raysim.config import Config
from raysim.core.messages import Broadcast, ClientUpdate
from raysim.data.shards import ShardStore
from raysim.engine.callbacks import Callback
from raysim.engine.driver import make_simulation, stop
from raysim.engine.setup import initial_state, prepare_shards, resolved
from raysim.tracking.checkpoint import Checkpoint


@dataclass
class Captured:
    """What the server held in round ``round``: the ``broadcast`` it sent and the ``updates`` of the chosen clients
    (by client id), with the replayed run's ``config`` and ``shards`` (read only to score an attack); for split
    learning, per chosen client and local step (one ``[B, T, D]`` tensor each): ``smashed``, its cut-layer features;
    ``encoder_outputs``, what the server's encoder computed from them; ``returned``, the loss's gradient in that
    output, which the client's tail sent back."""

    round: int
    broadcast: Broadcast
    updates: dict[int, ClientUpdate]
    config: Config
    shards: ShardStore
    smashed: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    encoder_outputs: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    returned: dict[int, list[torch.Tensor]] = field(default_factory=dict)


class ServerView(Callback):
    """Runs where the state lives: records the broadcast of round ``round`` (from the method's ``configure``, as
    sent), what split learning's server receives and computes that round for ``clients`` (None: every client) in
    their local steps (smashed features, encoder outputs, returned gradients), and, once the round's updates are
    screened, the messages of ``clients``."""

    def __init__(self, round: int, clients: list[int] | None):
        self.round, self.clients = round, clients
        self.broadcast: Broadcast | None = None
        self.updates: dict[int, ClientUpdate] = {}
        self.smashed: dict[int, list[torch.Tensor]] = {}
        self.encoder_outputs: dict[int, list[torch.Tensor]] = {}
        self.returned: dict[int, list[torch.Tensor]] = {}
        self.sampled: list[int] = []
        self.current = 0

    def wanted(self, client: int) -> bool:
        return self.clients is None or client in self.clients

    def kept(self, key: tuple | None) -> bool:
        """Whether a split-learning request keyed ``key`` (client, step) is one of a chosen client's in the round."""
        return key is not None and self.current == self.round and self.wanted(key[0])

    def on_start(self, simulation) -> None:
        configure = simulation.method.configure

        def recorded(round, state, client_ids):
            broadcast = configure(round, state, client_ids)
            self.current = round
            if round == self.round:
                self.broadcast = broadcast
            return broadcast

        simulation.method.configure = recorded
        server = simulation.server
        if server is not None:  # split learning: the encoder's requests of a local step carry (client, step)
            forward, backward = server.forward, server.backward

            def received(key, h):
                out = forward(key, h)
                if self.kept(key):
                    self.smashed.setdefault(key[0], []).append(h.detach().clone())
                    self.encoder_outputs.setdefault(key[0], []).append(out[0].detach().clone())
                return out

            def returned(key, grad_out, keep_for=None):
                if self.kept(key):
                    self.returned.setdefault(key[0], []).append(grad_out.detach().clone())
                return backward(key, grad_out, keep_for)

            server.forward, server.backward = received, returned
        self.simulation = simulation

    def on_round(self, round, report) -> None:
        if round == self.round:
            self.sampled = list(report.sampled)
            self.updates = {u.client_id: u for u in self.simulation.updates if self.wanted(u.client_id)}


@contextmanager
def replayed(config: Config, shards: ShardStore, start: Checkpoint, callbacks: list[Callback] = ()) -> Iterator:
    """A simulation of ``config`` in this process from ``start``, stopped on leaving; its clients train with the run's
    threads, and the attack then has this process's again."""
    threads = torch.get_num_threads()
    simulation = make_simulation(config, shards, start, None, callbacks)
    try:
        yield simulation
    finally:
        stop(simulation, graceful=True)
        torch.set_num_threads(threads)


def refuse_uncapturable(config: Config, round: int) -> None:
    """One line, before any replay, for what a capture cannot replay: a round the run does not have, another backend
    than the sequential one, asynchronous rounds and compressed broadcasts (what a client trained from is not the
    round's broadcast)."""
    if not 1 <= round <= config.federation.rounds:
        raise ConfigError(f"--round {round} is not a round of the run (1 to {config.federation.rounds})")
    if config.resources.backend != "sequential":
        raise ConfigError("a capture replays the run on the sequential backend; set resources.backend=sequential")
    if config.federation.asynchronous:
        raise ConfigError(
            "a capture replays synchronous rounds, and the run used federation.mode=async; attack a run with "
            "federation.mode=sync"
        )
    if config.compression.downlink != "none":
        raise ConfigError(
            "under compression.downlink clients train from the model the broadcast updates build, which a capture "
            "does not record; attack a run with compression.downlink=none"
        )


def capture(config: Config, round: int, clients: list[int] | None = None) -> Captured:
    """Replay ``config`` (its backend set to sequential) up to ``round`` and capture the messages of ``clients``
    (None: every client whose update the server kept) in that round. Raises :class:`ConfigError` (one line) for a
    round the run does not have, for asynchronous rounds and compressed broadcasts (what a client trained from is not
    the round's broadcast) and for a chosen client whose update the server did not receive that round."""
    refuse_uncapturable(config, round)
    shards = prepare_shards(config)
    config, initial, _, shards = initial_state(resolved(config), shards)
    view = ServerView(round, clients)
    start = Checkpoint("attack", 0, config.to_dict(), initial, {}, "")
    with replayed(config, shards, start, [view]) as simulation, steps("replaying the run: round", round) as step:
        for r in range(1, round + 1):
            simulation.run_round(r)
            step()
    missing = sorted(set(clients or ()) - set(view.updates))
    if missing or not view.updates:
        sampled = ", ".join(str(c) for c in sorted(view.sampled)) or "none"
        whose = f"client {missing[0]}" if missing else "any client"
        raise ConfigError(
            f"the server kept no update of {whose} in round {round} (sampled: {sampled}); pass --clients among them"
        )
    return Captured(
        round, view.broadcast, view.updates, config, shards, view.smashed, view.encoder_outputs, view.returned
    )
