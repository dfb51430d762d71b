"""What ``raysim ls options METHOD`` prints, and the reference pages show, of a setting: its key as ``--set`` takes
it, its type, default, the values it accepts and its help, all read from its declaration
(:func:`~raysim.base.settings.setting`)."""

from __future__ import annotations

import textwrap
from typing import Any

from raysim.base.settings import described
from raysim.core.registry import get_method


def shown(value: Any) -> str:
    """A default as a user writes it after ``--set KEY=``: YAML's null, true/false and lists."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(map(shown, value)) + "]"
    return str(value)


def accepts(entry: dict[str, Any]) -> str:
    """The values an entry accepts, from its choices and checks (``one of a, b``; ``must be at least 1``), or ''."""
    parts = [f"one of {', '.join(map(str, entry['choices']))}"] if entry["choices"] else []
    return "; ".join(parts + list(entry["checks"]))


def method_options(method: str) -> tuple[str, list[dict[str, Any]]]:
    """A method's config section (its ``options_key``: fgpt-u's is fgpt) and its options, as
    :func:`~raysim.base.settings.described` gives them; an unknown method is a one-line ConfigError."""
    info = get_method(method)
    return info.options_key, described(info.options)


def options_text(method: str, width: int = 100) -> str:
    """A method's options, two lines or more each: the key with its type, default and accepted values, then its
    help, indented."""
    section, entries = method_options(method)
    if not entries:
        return f"{method} has no options of its own (its config keys: raysim run --help, --set SECTION.KEY=VALUE)"
    lines = [f"{method}'s options (--set {section}.KEY=VALUE):"]
    for entry in entries:
        head = f"{entry['type']}, default {shown(entry['default'])}"
        key = f"{section}.{entry['name']}"
        lines.append(f"  {key:<34} " + "; ".join(filter(None, [head, accepts(entry)])))
        lines += textwrap.wrap(entry["help"], width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def option_names(method: str) -> list[str]:
    """A method's options as ``--set`` takes them: ``sgpt.groups``, ..."""
    section, entries = method_options(method)
    return [f"{section}.{entry['name']}" for entry in entries]
