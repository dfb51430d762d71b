"""The methods, one package each: ``algorithms/NAME/__init__.py`` declares the method (its description, family,
options and capabilities, one :func:`~raysim.core.registry.declare`) without importing torch, and
``algorithms/NAME/method.py`` holds its class, imported when a run first needs it (``MethodInfo.cls``). Importing this
package imports every method's declaration (:func:`declare_all`), which fills the registry: the config is built from
it before torch loads. Shipped as ``raysim.algorithms``; modules whose names start with ``_`` are shared parts.

A declaration imports only ``base``, ``core.registry`` and other declarations; a method's class imports torch, ``core``
and ``ops``, never Ray or the engine (tests/test_layers.py)."""

import importlib
import pkgutil
from collections.abc import Iterable


def declare_all(paths: Iterable[str], package: str) -> list[str]:
    """Import the declaration of every method package in ``paths`` (the folders of ``package``), in name order; the
    packages' names."""
    found = sorted(m.name for m in pkgutil.iter_modules(list(paths)) if m.ispkg and not m.name.startswith("_"))
    for name in found:
        importlib.import_module(f"{package}.{name}")
    return found


declare_all(__path__, __name__)
