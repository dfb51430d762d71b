"""raysim: a Ray-native simulator for heterogeneous federated learning with pretrained ViTs.

The names a user or a method author needs, re-exported here (``from raysim import Method, register, run``) and
imported on first use, so ``import raysim`` stays cheap. The layers below, each importing only the ones before it:

    core/       the method protocol, typed messages, registries, seeds, errors, the local training loops, precision
    ops/        pure math: aggregation, selection, contrastive terms, reweighting, SPSA, metrics
    data/       sources, partitioners, client shards
    models/     backbones, the prompt wrapper and the shipped weights
    config/     the config sections (one declaration per key), presets, overrides
    tracking/   MLflow, checkpoints, resume, report, plots, progress
    engine/     the round loop, executors, client runtime, callbacks, the driver, pretraining
    testing/    fault injection, tiny settings, FedAvg by hand
    sweep/      Ray Tune search spaces and sweeps
and, beside them, ``raysim.algorithms`` (one file per method) and ``raysim.actors`` (the ``ray.remote`` wrappers).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Method": "raysim.core.protocol",
    "ModelParts": "raysim.core.protocol",
    "ClientContext": "raysim.core.protocol",
    "CachesRowFeatures": "raysim.core.protocol",
    "SendsExtras": "raysim.core.protocol",
    "Personalised": "raysim.core.protocol",
    "SplitLearning": "raysim.core.protocol",
    "Diagnostics": "raysim.core.protocol",
    "ResolvesOptions": "raysim.core.protocol",
    "GlobalState": "raysim.core.messages",
    "Broadcast": "raysim.core.messages",
    "ClientUpdate": "raysim.core.messages",
    "register": "raysim.core.protocol",
    "get_method": "raysim.core.registry",
    "ConfigError": "raysim.base.errors",
    "Config": "raysim.config",
    "build_config": "raysim.config",
    "run": "raysim.engine.driver",
    "Callback": "raysim.engine.callbacks",
    "FedAvg": "raysim.algorithms.fedavg.method",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'raysim' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
