"""The method protocol: what every federated method implements, and the FedAvg behaviour it inherits.

A method is a class registered by name (:func:`raysim.registry.register`) with hooks only; the round loop
lives in :mod:`raysim.simulation` and is never written in a method. A method never imports ``ray``.

Hooks:
    ``prompt_spec(depth)``  what the worker's model looks like (prompt slots, what trains).
    ``extra_parameters(vit, generator)``  tensors of the method's own on the model (SGPT's keys).
    ``row_features(model, x)``  per-row values cached once per run with the shards (SGPT's query).
    ``init_global(model, generator)``  the communicated tensors and the server state.
    ``configure(round, state, client_ids)``  what the sampled clients receive: one shared view, plus
                            small per-client instructions (e.g. a cluster id) in ``ClientContext``.
    ``client_update(ctx, view, client_state, data)``  local training inside a worker.
    ``aggregate(round, state, results)``  server math (pure tensor functions in raysim/aggregate.py).
    ``server_segment(depth)`` / ``update_server(round, server, results)``  split learning: the blocks a server
                            runs and its update (FedV/FedVZ, :mod:`raysim.split`).
    ``resets_client_states(round)``  the round's aggregate replaces every client's persistent state.
    ``traffic(...)``  the round's bytes down and up (split learning counts activations and gradients).
    ``eval_view(view, client_state)``  the parameters a client is evaluated with (personalised methods).
    ``forward(model, x, data, rows)``  inference logits (FGPT-U's top-K ensemble, SGPT's selection).
    ``diagnostics(round, state, results, shards, evaluated)`` / ``artifacts(records, folder)``  extra
                            metrics per round and end-of-run pictures (e.g. SGPT's selection maps).

All state is tensors (``GlobalState.params`` and ``GlobalState.server``), never hidden attributes, so
checkpoints are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from raysim import aggregate as agg
from raysim import train
from raysim.config import Config, NoOptions
from raysim.data.shards import ClientData

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class GlobalState:
    """The communicated tensors (``params``) and server-only state (momentum buffers, counts, ...)."""

    params: Tensors
    server: Tensors = field(default_factory=dict)


@dataclass
class ClientResult:
    """What a client sends back: its update, its sample count, statistics and its new persistent state.

    ``state`` stays on the coordinator between the client's participations and is never aggregated.
    """

    client_id: int
    num_samples: int
    update: Tensors
    stats: dict[str, float] = field(default_factory=dict)
    state: Tensors | None = None


@dataclass(frozen=True)
class ClientContext:
    """Everything a client hook may use besides its data: the worker's model, its seed, the config."""

    round: int
    client_id: int
    seed: int
    model: torch.nn.Module
    device: torch.device
    config: Config
    instructions: Tensors = field(default_factory=dict)

    def generator(self) -> torch.Generator:
        """A fresh generator seeded for this (round, client): same draws on any worker or backend."""
        return torch.Generator().manual_seed(self.seed)


class Method:
    """Base class: FedAvg over the model's trainable tensors (McMahan et al., 2017).

    Subclasses usually override ``prompt_spec`` (which tensors train) and, where the paper says so,
    ``loss``, ``configure`` or ``aggregate``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    options_key: ClassVar[str | None] = None
    Options: ClassVar[type] = NoOptions
    needs_client_types: ClassVar[bool] = False  # evaluated per client type (FedGCR's sigma_type, cluster_acc)
    metrics: ClassVar[tuple[str, ...]] = ()  # per-round keys :meth:`diagnostics` may report (``raysim tune --metric``)
    mixed_precision: ClassVar[bool] = True  # client compute may run under bf16 autocast (``train.precision``)
    mixed_precision_note: ClassVar[str] = ""  # why not, where it may not (ends the error of train.precision=bf16)

    def __init__(self, config: Config):
        self.config = config
        self.options = config.options

    def prompt_spec(self, depth: int):
        """The prompt wrapper's spec (:class:`raysim.models.prompted.PromptSpec`) for a backbone of ``depth`` blocks."""
        raise NotImplementedError

    def extra_parameters(self, vit: torch.nn.Module, generator: torch.Generator) -> dict[str, torch.nn.Parameter]:
        """Parameters of the method's own on the model (``extra.<name>``); those requiring grad are communicated."""
        return {}

    def row_features(self, model: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """Values computed once per row and run from the frozen model (cached with the shards), or None."""
        return None

    def init_global(self, model: torch.nn.Module, generator: torch.Generator) -> GlobalState:
        """Initial global tensors: the worker model's trainable state (it is built from the run seed)."""
        return GlobalState(params=model.trainable_state())

    def configure(self, round: int, state: GlobalState, client_ids: list[int]) -> tuple[Tensors, dict[int, Tensors]]:
        """The view sent to every sampled client (one object, shared) and per-client instructions."""
        return state.params, {}

    def client_update(self, ctx: ClientContext, view: Tensors, client_state: Tensors | None,
                      data: ClientData) -> ClientResult:
        """Local training of the trainable tensors from the received view; returns the new tensors."""
        ctx.model.load_trainable(view)
        stats = train.local_train(ctx, data, lambda x, y, rows: self.loss(ctx, ctx.model(x), y, view))
        return ClientResult(ctx.client_id, len(data), ctx.model.trainable_state(), stats)

    def loss(self, ctx: ClientContext, logits: torch.Tensor, labels: torch.Tensor, view: Tensors) -> torch.Tensor:
        """The local objective; cross-entropy by default."""
        return torch.nn.functional.cross_entropy(logits, labels)

    def aggregate(self, round: int, state: GlobalState, results: list[ClientResult]) -> GlobalState:
        """Sample-weighted mean (N_i / N) of the clients' tensors (called only when some client had data)."""
        params = agg.weighted_mean([r.update for r in results], [r.num_samples for r in results])
        return GlobalState(params=params, server=state.server)

    def server_segment(self, depth: int) -> tuple[int, int] | None:
        """Split learning: the blocks ``(start, stop)`` the server's encoder runs (:mod:`raysim.split`), or None
        when the whole model lives on the clients."""
        return None

    def update_server(self, round: int, server, results: list[ClientResult]) -> dict[str, float]:
        """Split learning: update the server's encoder after the clients' round (FedV/FedVZ); extra metrics."""
        return {}

    def resets_client_states(self, round: int) -> bool:
        """True when this round's aggregate replaces every client's persistent state with the global tensors
        (FedV's head/tail averaging every ``fedround`` rounds)."""
        return False

    def traffic(self, round: int, view: Tensors, instructions: dict[int, Tensors], sampled: list[int],
                received: list[ClientResult]) -> tuple[float, float]:
        """Bytes (down, up) of the round: the view to every sampled client with its instructions, the updates back."""
        down = len(sampled) * agg.tensor_bytes(view) + sum(agg.tensor_bytes(i) for i in instructions.values())
        return float(down), float(sum(agg.tensor_bytes(r.update) for r in received))

    def eval_view(self, view: Tensors, client_state: Tensors | None) -> Tensors:
        """The tensors a client is evaluated with; the global view unless a method personalises."""
        return view

    def forward(self, model: torch.nn.Module, x: torch.Tensor, data: ClientData, rows: np.ndarray) -> torch.Tensor:
        """Inference logits for ``x`` (rows ``rows`` of ``data``), with the evaluated tensors loaded."""
        return model(x)

    def diagnostics(self, round: int, state: GlobalState, results: list[ClientResult], shards,
                    evaluated: bool) -> tuple[dict[str, float], dict[str, Any]]:
        """Extra metrics (logged per round) and records (kept for :meth:`artifacts`), computed on the
        coordinator after aggregation; ``evaluated`` rounds may also look at the shards' cached features.
        Records are plain JSON (string keys): checkpoints carry them."""
        return {}, {}

    def artifacts(self, records: list[dict[str, Any]], folder: Path) -> list[Path]:
        """Files (pictures, JSON) made at the end from every round's records, to log to MLflow."""
        return []
