"""Search-space files for ``raysim tune`` (``tune_spaces/METHOD.yaml``): a small YAML grammar over config keys,
mapped onto Ray Tune's samplers.

    # one comment line: what the paper tunes
    fixed:                       # optional: the same override in every trial
      federation.rounds: 10
    space:                       # config key -> one sampler
      sgpt.groups: {choice: [5, 10, 20]}
      sgpt.alpha_k: {uniform: [0.1, 0.9]}
      train.lr: {loguniform: [1.0e-4, 1.0e-2]}
      fedgcr.clusters: {randint: [3, 7]}      # both ends included
      fedprox.mu: {grid: [0.01, 0.1, 1.0]}    # every value, times num_samples

Every key must be a config key of the method (``section.key``), and every value a sampler may draw (each
choice/grid value, both bounds of a range) must make a valid config: errors name the file and the key.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from ray import tune

from raysim.base.errors import ConfigError
from raysim.base.paths import why_not_a_file
from raysim.config import Config, build_config, yaml12
from raysim.core.registry import get_method

SAMPLERS = ("choice", "grid", "uniform", "loguniform", "randint")
PRIVACY_SPACE = "privacy.yaml"  # the levers added to a method's space when its trials are private
# what a private sweep holds fixed: trials ranked by accuracy would pick the one that spends the most privacy
BUDGET_KEYS = ("privacy.mode", "privacy.noise_multiplier", "privacy.target_epsilon", "privacy.delta")


@dataclass(frozen=True)
class SearchSpace:
    """A parsed, validated space file: fixed overrides and one sampler spec per config key."""

    source: str
    samplers: dict[str, tuple[str, list]]
    fixed: dict[str, Any] = field(default_factory=dict)

    def grid_points(self) -> int:
        """The trials one sample makes: Tune runs every combination of the ``grid`` keys' values per sample."""
        return math.prod(len(values) for kind, values in self.samplers.values() if kind == "grid")

    def tune_space(self) -> dict[str, Any]:
        """Ray Tune's ``param_space``: config key -> a Tune sampler."""
        make = {
            "choice": tune.choice,
            "grid": tune.grid_search,
            "uniform": lambda v: tune.uniform(*v),
            "loguniform": lambda v: tune.loguniform(*v),
            "randint": lambda v: tune.randint(v[0], v[1] + 1),
        }  # Tune's upper bound is exclusive
        return {key: make[kind](values) for key, (kind, values) in self.samplers.items()}


def corners(space: SearchSpace, limit: int = 256) -> list[dict[str, Any]]:
    """Trial parameters at the space's corners: every value of a ``choice`` or ``grid`` key, the two ends of a range.
    Every combination where there are at most ``limit``; else every pair of keys' combinations, the other keys at
    their first value (a setting that only fails beside another is caught by pairs)."""
    ends = {key: values if kind in ("choice", "grid") else values[:2] for key, (kind, values) in space.samplers.items()}
    keys = list(ends)
    if math.prod(len(v) for v in ends.values()) <= limit:
        return [dict(zip(keys, point)) for point in itertools.product(*ends.values())]
    first = {key: values[0] for key, values in ends.items()}
    pairs = itertools.combinations(keys, 2) if len(keys) > 1 else [(key,) for key in keys]
    return [
        {**first, **dict(zip(pair, point))} for pair in pairs for point in itertools.product(*(ends[k] for k in pair))
    ]


def as_layer(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"sgpt.groups": 5}`` -> ``{"sgpt": {"groups": 5}}`` (a config layer)."""
    layer: dict[str, dict[str, Any]] = {}
    for dotted, value in overrides.items():
        section, key = dotted.split(".", 1)
        layer.setdefault(section, {})[key] = value
    return layer


def shipped_spaces() -> dict[str, Path]:
    """The methods' spaces that ship with raysim (``tune_spaces/NAME.yaml``), by name; not the privacy space."""
    files = resources.files("raysim.tune_spaces")
    found = {p.name[:-5]: Path(str(p)) for p in files.iterdir() if p.name.endswith(".yaml")}
    return {name: found[name] for name in sorted(found) if f"{name}.yaml" != PRIVACY_SPACE}


def default_space_file(method: str) -> str:
    """The shipped space of ``method``: ``tune_spaces/METHOD.yaml``, else that of its options (``fedvpt-d`` uses
    ``fedvpt.yaml``); the error lists the spaces that ship."""
    shipped = shipped_spaces()
    for name in (method, get_method(method).options_key):
        if name in shipped:
            return str(shipped[name])
    raise ConfigError(f"no search space ships for {method!r} (spaces: {', '.join(shipped)}); pass --space FILE.yaml")


def with_private_levers(space: SearchSpace, method: str, before: list[dict], after: list[dict]) -> SearchSpace:
    """``space`` with ``tune_spaces/privacy.yaml``'s samplers (the clip C) added when its trials run under
    differential privacy and neither the space, its fixed values nor the flags (``after``) set the clip; its source
    then reads ``METHOD.yaml+privacy.yaml``. The budget (epsilon, delta) is not sampled: it is what a sweep holds
    fixed (:data:`BUDGET_KEYS`)."""
    probe = build_config(method, [*before, as_layer(space.fixed), *after])
    named = {*space.samplers, *space.fixed} | {f"privacy.{k}" for layer in after for k in layer.get("privacy", {})}
    if not probe.privacy.private or "privacy.clip" in named:
        return space
    path = resources.files("raysim.tune_spaces").joinpath(PRIVACY_SPACE)
    private = load_space(str(path), method, [*before, as_layer(space.fixed)], after)
    return SearchSpace(f"{space.source}+{PRIVACY_SPACE}", {**space.samplers, **private.samplers}, space.fixed)


def load_space(path: str, method: str, before: list[dict], after: list[dict]) -> SearchSpace:
    """Parse and validate a space file against ``method``'s config: a trial's config is ``before`` (a preset) <
    ``fixed`` < ``after`` (flags, --set) < the sampled values."""
    where = Path(path).name if Path(path).parent.name == "tune_spaces" else path
    if Path(path).exists() and not Path(path).is_file():  # a folder, a FIFO (whose open waits for a writer), a device
        raise ConfigError(f"search space file {path} {why_not_a_file(path)}; see tune_spaces/ for examples")
    try:
        data = yaml12.load(Path(path).read_text())
    except OSError as error:
        raise ConfigError(
            f"search space file {path} {why_not_a_file(path, error)}; see tune_spaces/ for examples"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"search space file {path} is not UTF-8 text; a space is a YAML file") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{where} is not valid YAML: {yaml12.problem(error)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("space"), dict) or not data["space"]:
        raise ConfigError(f"{where} must have a non-empty 'space:' mapping of config keys to samplers")
    unknown = set(data) - {"space", "fixed"}
    if unknown:
        raise ConfigError(f"{where}: unknown top-level key {sorted(unknown)[0]!r}; valid: space, fixed")
    fixed = data.get("fixed") or {}
    if not isinstance(fixed, dict):
        raise ConfigError(f"{where}: 'fixed:' must map config keys to values, e.g. federation.rounds: 10")
    both = sorted(set(fixed) & set(data["space"]))
    if both:
        raise ConfigError(
            f"{where}: key {both[0]!r} is both fixed and sampled; keep it under one of 'fixed:' and 'space:'"
        )
    for key, value in fixed.items():
        _valid_value(where, "fixed", key, value, method, [*before, *after])
    samplers = {}
    for key, spec in data["space"].items():
        kind, values = _sampler(where, key, spec)
        for value in values if kind in ("choice", "grid") else values[:2]:
            _valid_value(where, "space", key, value, method, [*before, as_layer(fixed), *after])
        if kind in ("uniform", "loguniform"):  # whole-number bounds pass; the draws between them are real numbers
            inside = _inside(kind, *values)
            try:
                build_config(method, [*before, as_layer(fixed), *after, as_layer({key: inside})])
            except ConfigError as error:
                raise ConfigError(
                    f"{where}: space key {key!r}: {kind} draws values such as {inside:.4g}, which {key} refuses "
                    f"({error}); use randint or choice for whole numbers"
                ) from None
        samplers[key] = (kind, values)
    return SearchSpace(str(path), samplers, fixed)


def _sampler(where: str, key: str, spec: Any) -> tuple[str, list]:
    name = f"{where}: space key {key!r}"
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in SAMPLERS:
        raise ConfigError(f"{name} must be one sampler, e.g. {{choice: [1, 2]}}; valid samplers: {', '.join(SAMPLERS)}")
    kind, values = next(iter(spec.items()))
    if kind in ("choice", "grid"):
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{name}: {kind} needs a non-empty list of values")
        return kind, values
    if (
        not isinstance(values, list)
        or len(values) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
    ):
        raise ConfigError(f"{name}: {kind} needs [low, high], two numbers")
    low, high = values
    if kind == "randint" and not all(isinstance(v, int) for v in values):
        raise ConfigError(f"{name}: randint bounds must be integers, got [{low}, {high}]")
    if (low > high) if kind == "randint" else (low >= high):
        raise ConfigError(f"{name}: {kind} bounds [{low}, {high}] need low {'<=' if kind == 'randint' else '<'} high")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{name}: loguniform bounds [{low}, {high}] must be > 0")
    return kind, [low, high]


def _inside(kind: str, low: float, high: float) -> float:
    """A value ``kind`` draws between ``low`` and ``high``, never a whole number for whole-number bounds (an
    irrational share of the way, on the log scale for loguniform)."""
    if kind == "uniform":
        return low + (high - low) / math.sqrt(2)
    return math.exp(math.log(low) + (math.log(high) - math.log(low)) / math.sqrt(2))


def _valid_value(where: str, part: str, key: str, value: Any, method: str, layers: list[dict]) -> Config:
    if not isinstance(key, str) or key.count(".") != 1:
        raise ConfigError(f"{where}: {part} key {key!r} must look like section.key (e.g. train.lr)")
    try:
        return build_config(method, [*layers, as_layer({key: value})])
    except ConfigError as error:
        try:  # the same error without the key: the preset's or the flags' own, not the space's
            build_config(method, layers)
        except ConfigError as own:
            if str(own) == str(error):
                raise own from None
        raise ConfigError(f"{where}: {part} key {key!r} = {value!r}: {error}") from None
