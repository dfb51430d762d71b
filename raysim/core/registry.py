"""The methods by name (:data:`METHODS`, a :class:`~raysim.core.named.Registry` filled by importing
``raysim.algorithms`` on the first lookup), what is known of each (:class:`MethodInfo`) and :func:`register`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raysim.core.errors import ConfigError
from raysim.core.named import Registry

FAMILIES = ("global", "personalised", "fairness", "domain", "split", "group prompts")


@dataclass(frozen=True)
class NoOptions:
    """A method without options of its own."""


@dataclass(frozen=True)
class MethodInfo:
    """What the engine, the CLI and the tests know of a method, declared once in :func:`register`.

    Attributes:
        options: the frozen dataclass of the method's options (section ``options_key`` of the config).
        metrics: per-round keys the method reports beyond the shared ones (``raysim tune --metric``).
        bf16: whether client compute may run under bf16 autocast; ``fp32_reason`` says why not.
        needs_client_types: the method is evaluated per client type (FedGCR's sigma_type): clients need a domain.
        smoke: config layers under which the method runs in seconds on the tests' tiny settings.
        cohort: the method trains several clients together when ``train.cohort`` allows
            (:class:`~raysim.core.protocol.CohortTraining`).
        tiers: the method trains by capacity tier (``systems.tiers``): its clients train whatever tensors the
            model leaves trainable, and its server averages each row over the clients that sent it.
    """

    name: str
    description: str
    family: str
    cls: type
    options: type = NoOptions
    options_key: str = ""
    metrics: tuple[str, ...] = ()
    bf16: bool = True
    fp32_reason: str = ""
    needs_client_types: bool = False
    smoke: dict[str, Any] = field(default_factory=dict)
    cohort: bool = False
    tiers: bool = False

    @property
    def split_learning(self) -> bool:
        """The server runs part of the model (FedV's family): traffic per local step, not per round."""
        from raysim.core.protocol import SplitLearning  # torch: not imported where only names are read (the CLI)

        return issubclass(self.cls, SplitLearning)


METHODS: Registry[MethodInfo] = Registry("method", load="raysim.algorithms")


def register(
    name: str,
    description: str,
    *,
    family: str,
    options: type = NoOptions,
    options_key: str | None = None,
    metrics: tuple[str, ...] = (),
    bf16: bool = True,
    fp32_reason: str = "",
    needs_client_types: bool = False,
    smoke: dict[str, Any] | None = None,
    cohort: bool = False,
    tiers: bool = False,
):
    """Class decorator: make a :class:`~raysim.core.protocol.Method` subclass runnable as ``raysim run NAME``."""
    if family not in FAMILIES:
        raise ValueError(f"method {name!r}: family {family!r} is not one of {', '.join(FAMILIES)}")

    def wrap(cls):
        from raysim.core.protocol import CohortTraining  # torch: imported by the method's module anyway

        if cohort and not issubclass(cls, CohortTraining):
            raise TypeError(f"method {name!r} is registered with cohort=True but is not a CohortTraining")
        info = MethodInfo(
            name,
            description,
            family,
            cls,
            options,
            options_key or name,
            tuple(metrics),
            bf16,
            fp32_reason,
            needs_client_types,
            smoke or {},
            cohort,
            tiers,
        )
        cls.info = METHODS.add(name, info)
        return cls

    return wrap


def get_method(name: str) -> MethodInfo:
    """The registration of method ``name``; the error lists the valid names."""
    return METHODS.get(name)


def require_tiers(method: str, what: str) -> None:
    """A one-line ConfigError unless ``method`` trains by capacity tier (``what`` is the setting that asked)."""
    if not get_method(method).tiers:
        able = ", ".join(name for name, info in METHODS.items() if info.tiers)
        raise ConfigError(f"{what}: {method} does not train by capacity tier; methods that do: {able}")
