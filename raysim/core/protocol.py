"""The method protocol: six core hooks every method has, and small optional capabilities the engine checks by type.

A method is a package of ``algorithms/``: its ``__init__.py`` declares it by name
(:func:`raysim.core.registry.declare`), its ``method.py`` holds the class marked ``@implements(name)`` (a method
outside raysim: ``@register``);
the round loop lives in :mod:`raysim.engine.simulation` and is never written in a method. A method never imports
``ray`` or the engine. :class:`raysim.algorithms.fedavg.method.FedAvg` implements the core hooks (FedAvg over the
trainable tensors) and is what most methods extend.

Core hooks:
    ``parts(vit, generator)``  the model's trainable parts: prompt slots, what trains, the method's own tensors.
    ``init_global(model, generator)``  the initial :class:`GlobalState`.
    ``configure(round, state, client_ids)``  the round's :class:`Broadcast` to the sampled clients.
    ``client_update(ctx, broadcast, client_state, data)``  local training in a worker -> :class:`ClientUpdate`.
    ``aggregate(round, state, updates)``  the server's step (pure tensor functions of :mod:`raysim.ops`).
    ``predict(model, x, data, rows)``  inference logits.

Capabilities (mix in the ones a method needs): :class:`CachesRowFeatures`, :class:`SendsExtras`,
:class:`Personalised`, :class:`SplitLearning`, :class:`Diagnostics`, :class:`CohortTraining`,
:class:`ResolvesOptions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from raysim.core.messages import Broadcast, ClientUpdate, GlobalState, Tensors, split_prefixed
from raysim.core.registry import METHODS, MethodInfo, declare

if TYPE_CHECKING:
    from raysim.base.prompts import PromptSpec
    from raysim.data.shards import ClientData, ShardStore
    from raysim.models.prompted import PromptedViT


@dataclass(frozen=True)
class ModelParts:
    """What a method trains on the frozen backbone: the prompt wrapper's spec, and tensors of its own on the model
    (``extra.<name>``; those requiring grad are trained and communicated, e.g. SGPT's keys and group prompts)."""

    spec: PromptSpec
    extras: dict[str, torch.nn.Parameter] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientContext:
    """Everything a client hook may use besides its data: the worker's model, its seed, the config, and the
    per-client instructions of the round's :class:`Broadcast`."""

    round: int
    client_id: int
    seed: int
    model: PromptedViT
    device: torch.device
    config: Any
    instructions: Tensors = field(default_factory=dict)
    work: float = 1.0  # the share of its local samples the client gets through (< 1: a straggler cut at the deadline)
    tier: str = "all"  # the client's capacity tier (raysim.systems.tiers): what it trains and sends
    private: Any = None  # record-level DP-SGD's step (raysim.privacy.dp_sgd.DPSGD) under privacy.mode=record

    def generator(self) -> torch.Generator:
        """A fresh generator seeded for this (round, client): the same draws on any worker or backend."""
        return torch.Generator().manual_seed(self.seed)


class Method:
    """The core hooks. ``self.config`` is the run's resolved config; ``self.options`` its section of this method."""

    info: ClassVar[MethodInfo]  # set by ``implements`` (or ``register``)
    each_update: ClassVar[str] = ""
    """Why the server step reads each client's update rather than sums over the cohort (``""``: weighted sums are
    enough, as FedAvg's mean): such a method refuses differential privacy and secure aggregation, where the server
    sees only the cohort's sum."""
    user_dp: ClassVar[str] = ""
    """Why user-level DP's clipping cannot bound what this method's clients send (``""``: it can)."""
    own_broadcast: ClassVar[str] = ""
    """Why the server sends each client tensors of its own (``Broadcast.instructions``) rather than the one model all
    receive (``""``: it does not): ``compression.downlink``'s shared model cannot stand for them."""
    set_once: ClassVar[str] = ""
    """Why the server sets a tensor of the parameters once, to the first cohort's mean, and keeps it after (``""``:
    it steps every tensor with the updates): an asynchronous blend or a compressed delta would fix it at a scaled or
    sparsified mean for the rest of the run, so such a method refuses federation.mode=async and compression.*."""
    record_dp: ClassVar[str] = ""
    """Why record-level DP-SGD cannot cover what this method's clients send (``""``: its local training is
    :func:`raysim.core.training.local_train`'s plain steps, which DP-SGD replaces, and nothing else it sends reads
    the data)."""

    def __init__(self, config):
        self.config = config
        self.options = config.options

    def parts(self, vit: torch.nn.Module, generator: torch.Generator) -> ModelParts:
        """The trainable parts on ``vit`` (a timm VisionTransformer whose classifier already has the run's
        ``vit.num_classes``); ``generator`` draws the method's own tensors."""
        raise NotImplementedError

    def init_global(self, model: PromptedViT, generator: torch.Generator) -> GlobalState:
        """The initial global state, from the model every worker builds from the run seed."""
        raise NotImplementedError

    def configure(self, round: int, state: GlobalState, client_ids: list[int]) -> Broadcast:
        """What the sampled clients receive this round."""
        raise NotImplementedError

    def client_update(
        self, ctx: ClientContext, broadcast: Broadcast, client_state: Tensors | None, data: ClientData
    ) -> ClientUpdate:
        """Local training from the broadcast; ``client_state`` is what this client kept last time (or None)."""
        raise NotImplementedError

    def aggregate(self, round: int, state: GlobalState, updates: list[ClientUpdate]) -> GlobalState:
        """The server's step from the round's screened updates (called only when some client had data)."""
        raise NotImplementedError

    def predict(self, model: PromptedViT, x: torch.Tensor, data: ClientData, rows: np.ndarray) -> torch.Tensor:
        """Inference logits for ``x`` (rows ``rows`` of ``data``), with the evaluated tensors loaded."""
        return model(x)


class CachesRowFeatures:
    """Per-row values computed once per run from the frozen model and cached with the shards (SGPT's query)."""

    @property
    def caches_rows(self) -> bool:
        """Whether this configuration caches anything (SGPT with shared prompts only does not): the engine runs no
        pass, and puts no model on a GPU, for one that does not."""
        return True

    def row_features(self, model: PromptedViT, x: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class SendsExtras:
    """A method whose updates carry named extras; screening checks each against the declared shape.

    ``sent_once`` names the extras a client sends only on its first participation (FedMix's data means).
    """

    sent_once: ClassVar[frozenset[str]] = frozenset()
    extras_sent: ClassVar[dict[str, str]] = {}
    """Every extra a client may send, by name, and what it is (the channels differential privacy must account)."""
    private_extras: ClassVar[dict[str, float]] = {}
    """The extras user-level DP may clip and noise, each with its share of the clip (its L2 bound is share x C
    after :meth:`bounded_extra`; a share of 0: not sent under DP, the server's step reads zeros); an extra sent but
    not named here makes ``privacy.mode=user`` refuse the method."""

    def bounded_extra(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Extra ``name`` as it enters user-level DP's clipped sum (SGPT's counts as shares); default: as sent."""
        return tensor

    def uplink_extras(self, state: GlobalState) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every extra an update carries (a client without data may send none)."""
        raise NotImplementedError

    def rows_left_out(self, update: ClientUpdate) -> Tensors:
        """Per parameter, a boolean mask over its rows (first dimension) that ``update`` leaves to other clients by
        its own extras: SGPT's keys and FGPT's group prompts of the groups the client did not choose, which the
        count-weighted mean weighs at zero once another client chose them. A compressed uplink leaves them out (the
        server reads what it broadcast there) and error feedback keeps their change for a round where they count.
        Default: none."""
        return {}


class Personalised:
    """A client is evaluated with parameters of its own (its persistent state), not only the global ones."""

    def eval_params(self, params: Tensors, client_state: Tensors | None) -> Tensors:
        raise NotImplementedError

    def evaluated_states(
        self, state: GlobalState, client_ids: list[int], states: Mapping[int, Tensors]
    ) -> Mapping[int, Tensors]:
        """The client states :meth:`eval_params` reads for ``client_ids`` under the global ``state``; default: what
        the clients kept (``states``). pFedHN's are those its hypernetwork generates."""
        return states


ENCODER_PREFIX = "encoder."  # a split method's server blocks in ``GlobalState.server``: encoder.<block>.<name>


def split_encoder(server_state: Tensors) -> tuple[Tensors, Tensors]:
    """A ``GlobalState.server`` split into the server blocks' weights (``encoder.*``; empty for a method that is
    not split) and the rest of the server state."""
    return split_prefixed(server_state, ENCODER_PREFIX)


class SplitLearning:
    """The model is cut: the server runs blocks ``server_segment`` as a service the engine starts (FedV/FedVZ).

    The engine starts ``server_class(segment)`` in this process (sequential backend) or as a Ray actor (during the
    run's set-up, before the run exists), which ``build()``s its blocks out of the model every worker builds
    (``algorithms._split.ServerSegment``) and ``load()``s them with the ``encoder.*`` tensors of the global state's
    ``server`` part; the method gets a handle with the same interface either way.
    """

    server_class: ClassVar[type]

    def server_segment(self, depth: int) -> tuple[int, int]:
        """The blocks ``(start, stop)`` of a ``depth``-block backbone the server runs."""
        raise NotImplementedError

    def client_stand_in(self) -> torch.nn.Module:
        """The module that takes the server blocks' place in a client's model; the engine sets its ``server``
        attribute (the service, or a handle on it) before each call."""
        raise NotImplementedError

    def update_server(self, round: int, server, updates: list[ClientUpdate]) -> dict[str, float]:
        """Step the server's blocks after the clients' round; extra metrics."""
        raise NotImplementedError

    def resets_client_states(self, round: int) -> bool:
        """True when this round's aggregate replaces every client's persistent state (FedV's fedround)."""
        return False

    def traffic(
        self, round: int, broadcast: Broadcast, sampled: list[int], received: list[ClientUpdate]
    ) -> tuple[float, float]:
        """Bytes (down, up) of the round, counting what crossed the cut."""
        raise NotImplementedError


class Diagnostics:
    """Extra per-round metrics and end-of-run pictures (SGPT's selection maps, FedGCR's clusters)."""

    def diagnostics(
        self, round: int, state: GlobalState, updates: list[ClientUpdate], shards: ShardStore, evaluated: bool
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """Metrics logged this round and records (plain JSON) kept for :meth:`artifacts`; computed where the state
        lives, after aggregation. Evaluated rounds may read the shards' cached features (analysis only)."""
        raise NotImplementedError

    def artifacts(self, records: list[dict[str, Any]], folder: Path) -> list[Path]:
        """Files made at the end from every round's records, where the state lives (the coordinator on Ray), logged
        to MLflow by the driver."""
        return []

    def run_metrics(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """Metrics of the whole run, made at the end from every round's records (logged once, at step 0)."""
        return {}


@dataclass(frozen=True)
class CohortPhase:
    """One pass of local training as a pure objective, for cohort training.

    Attributes:
        names: the trainable tensors this pass trains (the others keep the values they have).
        objective: ``(x, y, features) -> (loss, aux)`` written against the worker's model, whose trainable tensors
            are the client's own while it runs; ``features`` are the batch's rows of the cached row features; ``aux``
            is a tensor the method collects per step (SGPT's selected groups; a zero scalar when it needs none).
        block: the batch order's seed is ``derive_seed(client seed, BLOCK, block)``; None: the client's seed.
    """

    names: tuple[str, ...]
    objective: Callable
    block: int | None = None


class CohortTraining:
    """Local training is steps of pure objectives over the trainable tensors, from the broadcast ones, with no
    client state: the engine may train several clients together (``train.cohort``), one forward of the frozen
    backbone over their batches side by side, each client's gradient exactly its own. Declared at registration
    (``cohort=True``), so a subclass that changes the local update (a mixin measuring a loss first) does not
    inherit it by accident."""

    def cohort_phases(self, model: PromptedViT, broadcast: Broadcast) -> list[CohortPhase]:
        """The passes of local training, in order, as objectives over ``model`` (the worker's)."""
        raise NotImplementedError

    def cohort_update(
        self, ctx: ClientContext, broadcast: Broadcast, trained: Tensors, aux: list, metrics: dict[str, float]
    ) -> ClientUpdate:
        """The client's update from its trained tensors and its objectives' aux (per phase, one per step, in order);
        default: the tensors."""
        return ClientUpdate(ctx.client_id, int(metrics.pop("rows")), trained, metrics=metrics)


class ResolvesOptions:
    """A method with options whose default is decided by the run (SGPT's blocks: the paper's layout scaled to the
    backbone): the engine records the values the run used, not the placeholders."""

    def resolved_options(self, depth: int) -> Any:
        """``self.options`` with every value left to the method made concrete for a ``depth``-block backbone
        (the same run: the method computes with them exactly as with the placeholders)."""
        raise NotImplementedError


def implements(name: str):
    """Class decorator: the class is method ``name``'s, as :func:`~raysim.core.registry.declare` named it; sets
    ``cls.info`` and checks the declaration against the class (its import path, ``cohort`` and the split-learning
    family)."""

    def wrap(cls):
        info = METHODS.get(name)
        where = f"{cls.__module__}:{cls.__qualname__}"
        if info.implementation not in (cls, where):
            raise TypeError(f"method {name!r} is declared as {info.implementation}, not {where}")
        if info.cohort and not issubclass(cls, CohortTraining):
            raise TypeError(f"method {name!r} is declared with cohort=True but is not a CohortTraining")
        if info.split_learning != issubclass(cls, SplitLearning):
            raise TypeError(f"method {name!r}: family {info.family!r} must be 'split' exactly when it is SplitLearning")
        cls.info = info
        return cls

    return wrap


def register(name: str, description: str, **facts):
    """Class decorator for a method defined outside raysim: :func:`declare` (``facts``: its keyword arguments) and
    :func:`implements` at once."""

    def wrap(cls):
        declare(name, cls, description, **facts)
        return implements(name)(cls)

    return wrap
