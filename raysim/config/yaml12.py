"""YAML as config values are read everywhere (presets, ``--set``, search spaces): YAML 1.2's booleans.

PyYAML follows YAML 1.1, where ``on``/``off``/``yes``/``no`` are booleans, so ``--set train.cohort=off`` arrived
as ``False`` for a field whose choices are ``auto``/``off``. Here only ``true``/``false`` are booleans.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

BOOL = "tag:yaml.org,2002:bool"


class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load(text: str) -> Any:
    """``text`` parsed as safe YAML with YAML 1.2's booleans."""
    return yaml.load(text, Loader=_Loader)
