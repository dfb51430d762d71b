"""YAML as config values are read everywhere (presets, ``--set``, search spaces): YAML 1.2's booleans and keys.

PyYAML follows YAML 1.1, where ``on``/``off``/``yes``/``no`` are booleans, so ``--set train.cohort=off`` arrived
as ``False`` for a field whose choices are ``auto``/``off``. Here only ``true``/``false`` are booleans. YAML 1.2 also
requires a mapping's keys to be unique, where PyYAML keeps the last of a repeated key: here a repeated key is an error.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

BOOL = "tag:yaml.org,2002:bool"
MERGE = "tag:yaml.org,2002:merge"


class RepeatedKey(yaml.constructor.ConstructorError):
    """A mapping gives one key twice."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        keys = [  # before merge keys (<<) are flattened in: a key may override a merged one
            self.construct_object(key, deep=deep)
            for key, _ in node.value
            if isinstance(key, yaml.ScalarNode) and key.tag != MERGE
        ]
        repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if repeated:
            raise RepeatedKey(None, None, f"key {repeated[0]!r} is given twice in one mapping", node.start_mark)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load(text: str) -> Any:
    """``text`` parsed as safe YAML with YAML 1.2's booleans."""
    return yaml.load(text, Loader=_Loader)
