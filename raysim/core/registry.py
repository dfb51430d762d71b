"""The methods by name (:data:`METHODS`, a :class:`~raysim.base.named.Registry` filled by importing
``raysim.algorithms``, every method's declaration, on the first lookup), what is known of each (:class:`MethodInfo`),
and :func:`declare`, which adds one: its facts, its class named by import path and imported on first use, so the config
is built without importing torch. The class side, :func:`~raysim.core.protocol.implements` and
:func:`~raysim.core.protocol.register`, lives with the protocol it checks the class against."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raysim.base.errors import ConfigError
from raysim.base.named import Registry

FAMILIES = ("global", "personalised", "fairness", "domain", "split", "group prompts")


@dataclass(frozen=True)
class NoOptions:
    """A method without options of its own."""


@dataclass(frozen=True)
class MethodInfo:
    """What the engine, the CLI and the tests know of a method, declared once in :func:`declare` or :func:`register`.

    Attributes:
        implementation: the method's class, or its import path ``"module:Class"`` (imported by :attr:`cls`).
        options: the frozen dataclass of the method's options (section ``options_key`` of the config).
        metrics: per-round keys the method reports beyond the shared ones (``raysim tune --metric``).
        bf16: whether client compute may run under bf16 autocast; ``fp32_reason`` says why not.
        needs_client_types: the method is evaluated per client type (FedGCR's sigma_type): clients need a domain.
        setting: the preset a run of the method takes when the user chose no preset, data set or partition (the
            default data cannot serve it: FedGCR's client types), which ``raysim run`` and ``compare`` say they use.
        smoke: config layers under which the method runs in seconds on the tests' tiny settings.
        cohort: the method trains several clients together when ``train.cohort`` allows
            (:class:`~raysim.core.protocol.CohortTraining`).
        tiers: the method trains by capacity tier (``systems.tiers``): its clients train whatever tensors the
            model leaves trainable, and its server averages each row over the clients that sent it.
        check: what the method requires of the whole config beyond its options' own checks (a one-line
            ConfigError), without torch, before a run starts (:func:`~raysim.config.check_runnable`).
    """

    name: str
    description: str
    family: str
    implementation: str | type
    options: type = NoOptions
    options_key: str = ""
    metrics: tuple[str, ...] = ()
    bf16: bool = True
    fp32_reason: str = ""
    needs_client_types: bool = False
    setting: str | None = None
    smoke: dict[str, Any] = field(default_factory=dict)
    cohort: bool = False
    tiers: bool = False
    check: Callable[[Any], None] | None = None

    @property
    def split_learning(self) -> bool:
        """The server runs part of the model (FedV's family): traffic per local step, not per round."""
        return self.family == "split"

    @property
    def cls(self) -> type:
        """The method's class (:class:`~raysim.core.protocol.Method`), its module imported on first use (torch)."""
        if isinstance(self.implementation, type):
            return self.implementation
        module, name = self.implementation.split(":")
        return getattr(importlib.import_module(module), name)


METHODS: Registry[MethodInfo] = Registry("method", load="raysim.algorithms")


def declare(
    name: str,
    implementation: str | type,
    description: str,
    *,
    family: str,
    options: type = NoOptions,
    options_key: str | None = None,
    metrics: tuple[str, ...] = (),
    bf16: bool = True,
    fp32_reason: str = "",
    needs_client_types: bool = False,
    setting: str | None = None,
    smoke: dict[str, Any] | None = None,
    cohort: bool = False,
    tiers: bool = False,
    check: Callable[[Any], None] | None = None,
) -> MethodInfo:
    """Make method ``name`` runnable as ``raysim run NAME``; ``implementation``: its class or ``"module:Class"``,
    whose class carries :func:`implements`."""
    if family not in FAMILIES:
        raise ValueError(f"method {name!r}: family {family!r} is not one of {', '.join(FAMILIES)}")
    info = MethodInfo(
        name,
        description,
        family,
        implementation,
        options,
        options_key or name,
        tuple(metrics),
        bf16,
        fp32_reason,
        needs_client_types,
        setting,
        smoke or {},
        cohort,
        tiers,
        check,
    )
    return METHODS.add(name, info)


def get_method(name: str) -> MethodInfo:
    """The registration of method ``name``; the error lists the valid names."""
    return METHODS.get(name)


def require_tiers(method: str, what: str) -> None:
    """A one-line ConfigError unless ``method`` trains by capacity tier (``what`` is the setting that asked)."""
    if not get_method(method).tiers:
        able = ", ".join(name for name, info in METHODS.items() if info.tiers)
        raise ConfigError(f"{what}: {method} does not train by capacity tier; methods that do: {able}")
