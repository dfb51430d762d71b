"""A setting: one declaration of a config key or a method option, its default, help, CLI flag, values and checks.

The config sections (:mod:`raysim.config.sections`) and the methods' options (declared in each method's package of
:mod:`raysim.algorithms`) are frozen dataclasses whose fields are declared with :func:`setting`; :func:`validate` runs
the checks, the CLI builds its flags from them, and ``raysim ls options`` and the documentation's reference print them.
Errors are :class:`~raysim.base.errors.ConfigError` with one line naming the key.
"""

from __future__ import annotations

import math
import reprlib
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from raysim.base.errors import ConfigError

Check = tuple[Callable[[Any], bool], str]  # (predicate on the value, what it must be)
SHOWN_CHARACTERS = 100
_short = reprlib.Repr()  # Repr's keyword arguments are Python 3.12's
_short.maxlevel, _short.maxlist, _short.maxtuple, _short.maxdict = 1, 8, 8, 8
_short.maxstring = _short.maxother = SHOWN_CHARACTERS


def shown(value: Any, quoted: bool = True) -> str:
    """``value`` as a one-line error shows it: whole where short, cut where long (a YAML alias of a few bytes can
    stand for a list of gigabytes); ``quoted=False`` shows a text without quotes, as ``str`` does."""
    if isinstance(value, str) and not quoted:
        return value if len(value) <= SHOWN_CHARACTERS else value[: SHOWN_CHARACTERS - 3] + "..."
    return _short.repr(value)


def setting(
    default: Any, help: str, *, flag: str | None = None, choices: tuple = (), checks: tuple[Check, ...] = ()
) -> Any:
    """A config key: its default, one line of help, its ``raysim run`` flag (``--clients``) if it has one, the
    values it may take and the checks it must pass (``(predicate, "must be at least 1")``)."""
    return field(default=default, metadata={"help": help, "flag": flag, "choices": choices, "checks": checks})


def at_least(low: float, why: str = "") -> Check:
    return (lambda v: v >= low, f"must be at least {low:g}" + (f" ({why})" if why else ""))


def at_most(high: float, why: str = "") -> Check:
    return (lambda v: v <= high, f"must be at most {high:g}" + (f" ({why})" if why else ""))


def in_range(low: float, high: float, *, open_low: bool = False, open_high: bool = False, why: str = "") -> Check:
    """``low <= v <= high``, either end open; the requirement reads ``must be in [low, high)``."""
    brackets = ("(" if open_low else "[", ")" if open_high else "]")
    return (
        lambda v: (low < v if open_low else low <= v) and (v < high if open_high else v <= high),
        f"must be in {brackets[0]}{low:g}, {high:g}{brackets[1]}" + (f" ({why})" if why else ""),
    )


def non_negative(why: str = "") -> Check:
    return (lambda v: v >= 0, "must be >= 0" + (f" ({why})" if why else ""))


def positive(why: str = "") -> Check:
    return (lambda v: v > 0, "must be > 0" + (f" ({why})" if why else ""))


FLOAT32_MAX = 3.4028234663852886e38  # torch's float32 overflows past it
MAX_THREADS = 1024  # torch threads one process may ask for: past the cores they only wait, past ~1e5 libgomp crashes
NAME_CHARACTERS = 200  # a name that names a folder too (an experiment, a sweep): file systems take 255 bytes
NON_NEGATIVE: Check = non_negative()
POSITIVE: Check = positive()


def validate(section) -> None:
    """Run every field's choices and checks; the first failure raises a one-line ConfigError. No setting takes an
    infinite or NaN number (``.inf`` in YAML, ``1e400`` on the command line), nor one beyond float32's range."""
    for spec in fields(section):
        value = getattr(section, spec.name)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{spec.name}={value} must be a finite number")
        if isinstance(value, float) and abs(value) > FLOAT32_MAX:
            raise ConfigError(f"{spec.name}={value} is beyond float32's range (3.4e38), in which the clients compute")
        choices = spec.metadata.get("choices", ())
        if choices and value not in choices:
            raise ConfigError(f"{spec.name}={shown(value)} is not one of {', '.join(map(str, choices))}")
        for predicate, requirement in spec.metadata.get("checks", ()):
            if not predicate(value):
                raise ConfigError(f"{spec.name}={shown(value, quoted=False)} {requirement}")


@dataclass(frozen=True)
class Settings:
    """A frozen dataclass of settings that validates itself when built (a method's options derive from it)."""

    def __post_init__(self):
        validate(self)


def default_of(spec) -> Any:
    return None if spec.default is MISSING else spec.default


def differs(section, key: str) -> bool:
    """Whether field ``key`` of the config section ``section`` holds another value than its default."""
    return getattr(section, key) != default_of(next(spec for spec in fields(section) if spec.name == key))


def type_name(cls, name: str) -> str:
    """The type of field ``name`` of ``cls`` as a user writes the value: int, float, str, bool, list, or ``X or
    null``."""
    hint = typing.get_type_hints(cls)[name]
    names = [
        "null" if t is type(None) else {tuple: "list"}.get(t, getattr(t, "__name__", str(t)))
        for t in (typing.get_args(hint) or (hint,))
    ]
    return " or ".join(names)


def described(cls) -> list[dict[str, Any]]:
    """Every field of a settings dataclass as ``name, type, default, help, flag, choices, checks`` (the checks' texts):
    what ``raysim ls options`` and the reference pages print."""
    return [
        {
            "name": spec.name,
            "type": type_name(cls, spec.name),
            "default": default_of(spec),
            "help": spec.metadata.get("help", ""),
            "flag": spec.metadata.get("flag"),
            "choices": tuple(spec.metadata.get("choices", ())),
            "checks": tuple(text for _, text in spec.metadata.get("checks", ())),
        }
        for spec in fields(cls)
    ]
