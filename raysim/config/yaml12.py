"""YAML as config values are read everywhere (presets, ``--set``, search spaces): YAML 1.2's booleans, numbers and
keys.

PyYAML follows YAML 1.1, where ``on``/``off``/``yes``/``no`` are booleans, so ``--set train.cohort=off`` arrived
as ``False`` for a field whose choices are ``auto``/``off``. Here only ``true``/``false`` are booleans. Numbers are
YAML 1.2's core schema too: ``010`` is ten (1.1: octal eight), ``1e-4`` a float (1.1: a string), and ``1_000``,
``12:30`` (1.1: sexagesimal 750) and ``0b11`` are strings; ``0o17`` and ``0x1f`` are octal and hexadecimal. YAML 1.2
also requires a mapping's keys to be unique, where PyYAML keeps the last of a repeated key: here a repeated key is an
error.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
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


def _not_a(text: str, kind: str, node) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(None, None, f"{text!r} is not a YAML 1.2 {kind}", node.start_mark)


def _int(loader, node) -> int:
    text = loader.construct_scalar(node)
    try:
        if text[:2] in ("0o", "0x"):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)
    except ValueError:  # an explicit !!int on text that is none (0b11, 1_000)
        raise _not_a(text, "int", node) from None


def _float(loader, node) -> float:
    text = loader.construct_scalar(node).lower().lstrip("+")
    try:
        return {".inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}.get(text) or float(text)
    except ValueError:
        raise _not_a(text, "float", node) from None


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (BOOL, INT, FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
_Loader.add_implicit_resolver(
    FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_Loader.add_constructor(INT, _int)
_Loader.add_constructor(FLOAT, _float)


def load(text: str) -> Any:
    """``text`` parsed as safe YAML with YAML 1.2's booleans."""
    return yaml.load(text, Loader=_Loader)


def problem(error: yaml.YAMLError) -> str:
    """What is wrong in the text, and where (``mapping values are not allowed here (line 2, column 9)``): PyYAML's
    message spreads over lines, its first (``while parsing a flow node``) saying where it was, not what it found."""
    what = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else what
