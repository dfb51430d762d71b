"""Registry of methods by name. A method file registers itself with ``@register("name", "one line")``."""

from __future__ import annotations

import importlib

from raysim.errors import unknown_name

METHODS: dict[str, type] = {}


def register(name: str, description: str):
    """Class decorator: make a :class:`~raysim.method.Method` subclass runnable as ``raysim run NAME``."""

    def wrap(cls):
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        cls.name, cls.description = name, description
        if cls.__dict__.get("options_key") is None:
            cls.options_key = name
        METHODS[name] = cls
        return cls

    return wrap


def load_methods() -> dict[str, type]:
    """Import every method module (raysim.algorithms) and return the registry."""
    importlib.import_module("raysim.algorithms")
    return METHODS


def get_method(name: str) -> type:
    """The method class registered under ``name``; the error lists the valid names."""
    load_methods()
    if name not in METHODS:
        raise unknown_name("method", name, METHODS)
    return METHODS[name]
