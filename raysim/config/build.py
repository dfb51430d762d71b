"""A whole run configuration: the sections, the method's options, YAML presets and ``key=value`` overrides.

Layers merge as defaults < preset < CLI flags < ``--set``; each section validates itself and :class:`Config` checks
what spans sections, so a config that exists is a valid one. Method options live in a section named after the
method's ``options_key`` (``fedprox.mu=0.1``) and are validated by the method's own options dataclass.
``build_config`` is pure: ``train.precision=auto`` stays ``auto`` until the driver resolves it on its machine.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from raysim.base.errors import ConfigError, unknown_name
from raysim.base.paths import why_not_a_file
from raysim.base.settings import shown, type_name
from raysim.config import yaml12
from raysim.config.sections import (
    SECTIONS,
    CheckpointConfig,
    CompressionConfig,
    DataConfig,
    FederationConfig,
    ModelConfig,
    PrivacyConfig,
    ResourceConfig,
    SystemsConfig,
    TrackingConfig,
    TrainConfig,
)
from raysim.core.registry import METHODS, NoOptions, get_method, require_tiers
from raysim.data import FROM_DISK
from raysim.privacy import calibration, channels

NOT_COMPUTED = ("tracking", "resources", "checkpoint")  # where and how a run goes, not what it computes


@dataclass(frozen=True)
class Config:
    """A whole, validated run configuration."""

    method: str
    federation: FederationConfig = field(default_factory=FederationConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    systems: SystemsConfig = field(default_factory=SystemsConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    options: Any = field(default_factory=NoOptions)

    def __post_init__(self):
        fed, comp = self.federation, self.compression
        if self.federation.asynchronous:
            self._check_async()
        if self.clocked and get_method(self.method).split_learning:
            raise ConfigError(
                f"{self.method} is split learning: its traffic is per local step, which the virtual clock does not "
                "model; unset systems.* and federation.deadline_s/over_select"
            )
        if self.compression.on and get_method(self.method).split_learning:
            raise ConfigError(
                f"{self.method} is split learning: its clients send activations every local step, not an update "
                "compression.uplink could encode; unset compression.*"
            )
        stepped = [
            (what, fix)
            for what, fix, on in (
                ("federation.mode=async", "use federation.mode=sync", fed.asynchronous),
                ("compression.*", "unset compression.*", comp.on),
            )
            if on
        ]
        set_once = stepped and get_method(self.method).cls.set_once  # torch: only then
        if set_once:
            raise ConfigError(
                f"{self.method} sets a tensor once and keeps it ({set_once}), which {stepped[0][0]} would blend or "
                f"encode as an update and fix at the wrong value; {stepped[0][1]}"
            )
        own = self.compression.downlink != "none" and get_method(self.method).cls.own_broadcast  # torch: only then
        if own:
            raise ConfigError(
                f"{self.method} sends each client tensors of its own ({own}), which compression.downlink's one shared "
                "model cannot stand for; unset compression.downlink"
            )
        if self.systems.tiers is not None:
            require_tiers(self.method, "systems.tiers")
        self._check_privacy()
        workers = self.resources.workers
        if workers > self.federation.clients:
            raise ConfigError(
                f"workers={workers} is more than the {self.federation.clients} clients; use --workers "
                f"{min(self.federation.clients, 2)} or fewer"
            )

    def _check_privacy(self) -> None:
        """What spans privacy and the other sections; then every channel the method sends must be covered."""
        fed, p = self.federation, self.privacy
        if p.mode == "user" and (fed.over_select > 0 or self.systems.trace is not None):
            raise ConfigError(
                "privacy.mode=user accounts a uniform cohort; over-selection keeps the first to finish (which other "
                "clients' data decide) and a trace draws among the clients online; unset federation.over_select and "
                "systems.trace"
            )
        if fed.sampling == "poisson" and self.clocked:
            raise ConfigError(
                "federation.sampling=poisson draws from every trainable client, the virtual clock from those online; "
                "use federation.sampling=fixed with systems.*, deadlines and over-selection"
            )
        if p.secure_aggregation and p.min_survivors > fed.clients_per_round:
            raise ConfigError(
                f"privacy.min_survivors={p.min_survivors} is more than the {fed.clients_per_round} clients a round; "
                f"lower it or raise --participation"
            )
        if p.secure_aggregation and self.compression.uplink != "none":
            raise ConfigError(
                f"privacy.secure_aggregation masks every coordinate of every input, so the server cannot add "
                f"compression.uplink={self.compression.uplink}'s encodings, whose coordinates or scales differ per "
                "client; unset compression.uplink (compression.downlink may stay)"
            )
        if p.secure_aggregation and p.mode == "user" and fed.sampling == "poisson":
            raise ConfigError(
                "privacy.secure_aggregation loses a round whose survivors are fewer than privacy.min_survivors, and "
                "under federation.sampling=poisson how many there are depends on whether a client takes part, which "
                "user-level accounting does not count; use federation.sampling=fixed"
            )
        if p.secure_aggregation and p.mode == "user" and fed.deadline_s > 0 and fed.stragglers != "wait":
            raise ConfigError(
                "privacy.secure_aggregation loses a round whose survivors are fewer than privacy.min_survivors, and "
                f"with federation.deadline_s and federation.stragglers={fed.stragglers} a client's arrival depends on "
                "its rows (a straggler with no time for one batch sends nothing), which user-level accounting does "
                "not count; use federation.stragglers=wait, or no deadline"
            )
        if p.accountant == "pld" and (p.mode == "record" or (p.mode == "user" and fed.sampling == "fixed")):
            raise ConfigError(
                "privacy.accountant=pld cannot account sampling without replacement (a fixed cohort, DP-SGD's "
                "batches); use privacy.accountant=rdp, or federation.sampling=poisson for user-level DP"
            )
        if p.mode == "record" and self.train.cohort == "on":
            raise ConfigError(
                "privacy.mode=record clips each row's gradient, which cohort training does not; use "
                "train.cohort=off or auto"
            )
        calibration.check_delta(self)  # user level; record level once the clients' sizes are known
        channels.check(self)

    def _check_async(self) -> None:
        """What asynchronous mode needs of the method, the clock and privacy."""
        info = get_method(self.method)
        why = "it is split learning: its server steps with every local step of a cohort" if info.split_learning else ""
        why = why or info.cls.each_update
        if why:
            raise ConfigError(
                f"{self.method} cannot run federation.mode=async: {why}, which needs a synchronous cohort; use "
                f"federation.mode=sync"
            )
        if not any(getattr(self.systems, k) is not None for k in ("speed", "downlink", "uplink", "trace")):
            raise ConfigError(
                "federation.mode=async orders the clients by when they finish on the virtual clock; give them devices, "
                "e.g. systems.speed=lognormal:3,0.5 or systems.trace=example"
            )
        if self.privacy.private or self.privacy.secure_aggregation:
            raise ConfigError(
                "privacy.* accounts and masks synchronous cohorts; asynchronous participation is not accounted: use "
                "federation.mode=sync with privacy.*"
            )

    @property
    def clocked(self) -> bool:
        """Whether the run keeps a virtual clock (docs/systems.md): a device property, a deadline or over-selection."""
        fed = self.federation
        return self.systems.modelled or fed.deadline_s > 0 or fed.over_select > 0 or fed.asynchronous

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict (YAML-able), method options under the method's options key."""
        out: dict[str, Any] = {"method": self.method}
        for name in SECTIONS:
            out[name] = dataclasses.asdict(getattr(self, name))
        if fields(self.options):
            out[get_method(self.method).options_key] = dataclasses.asdict(self.options)
        return out

    def flat(self) -> dict[str, Any]:
        """``section.key -> value``, as logged to MLflow params."""
        flat: dict[str, Any] = {}
        for section, values in self.to_dict().items():
            if isinstance(values, dict):
                flat.update({f"{section}.{key}": value for key, value in values.items()})
            else:
                flat[section] = values
        return flat


def presets() -> dict[str, str]:
    """Preset name -> first comment line (its description)."""
    out = {}
    for entry in sorted(resources.files("raysim.config.presets").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            first = entry.read_text().splitlines()[0] if entry.read_text() else ""
            out[entry.name[: -len(".yaml")]] = first.lstrip("# ").strip()
    return out


def load_preset(name_or_path: str) -> dict[str, Any]:
    """A preset by name (``raysim ls presets``) or a YAML file path, as a nested dict."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"preset file {name_or_path} {why_not_a_file(path)}")
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            raise ConfigError(f"preset file {name_or_path} is not UTF-8 text; a preset is a YAML file") from None
        except OSError as error:
            raise ConfigError(f"preset file {name_or_path} {why_not_a_file(path, error)}") from None
    elif name_or_path in presets():  # a folder of that name here does not hide it
        text = resources.files("raysim.config.presets").joinpath(f"{name_or_path}.yaml").read_text()
    elif path.is_dir():
        raise ConfigError(
            f"preset {name_or_path} is a folder; pass a YAML file in it, or a preset by name (raysim ls presets)"
        )
    elif path.exists():  # a device, a FIFO: no preset's name has a slash
        raise ConfigError(f"preset file {name_or_path} {why_not_a_file(path)}; a preset is a YAML file")
    else:
        raise unknown_name("preset", name_or_path, presets())
    try:
        data = yaml12.load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"preset {name_or_path} is not valid YAML: {yaml12.problem(error)}") from None
    if data is None:
        raise ConfigError(
            f"preset {name_or_path} sets nothing (it is empty, or only comments); give it settings, e.g. "
            "'federation: {rounds: 10}', or drop --preset"
        )
    if not isinstance(data, dict) or not all(isinstance(v, dict) or k == "method" for k, v in data.items()):
        raise ConfigError(
            f"preset {name_or_path} must map section names to mappings, e.g. 'federation: {{rounds: 10}}'"
        )
    return data


def preset_method(name_or_path: str | None) -> str | None:
    """The method a preset names in its top-level ``method:`` key (a run's saved ``config.yaml`` does), or None."""
    named = load_preset(name_or_path).get("method") if name_or_path else None
    if named is not None and (not isinstance(named, str) or named not in METHODS):
        raise ConfigError(
            f"preset {name_or_path} names method {named!r}, which is not registered; valid methods: "
            f"{', '.join(sorted(METHODS))}"
        )
    return named


def other_method_note(preset: str | None, methods: list[str]) -> str | None:
    """What a run, sweep or comparison says when its preset names a method (:func:`preset_method`) that is none of
    ``methods``: they run on its settings, and its method's own options are not used."""
    recorded = preset_method(preset)
    if recorded is None or recorded in methods:
        return None
    return (
        f"preset {preset} was saved for {recorded}; running {', '.join(methods)} on its settings ({recorded}'s own "
        "options are not used)"
    )


def preset_for_method(preset: Mapping[str, Any], method: str) -> dict[str, Any]:
    """A preset's layer for ``method``: option sections of other registered methods are dropped, so one
    preset (a paper's setting) can carry the options of every method it is run with."""
    own = get_method(method).options_key
    others = {info.options_key for _, info in METHODS.items()} - {own}
    return {key: value for key, value in preset.items() if key not in others}


def own_setting(methods: list[str], preset: str | None, layers: list[Mapping[str, Any]]) -> str | None:
    """The preset that ``methods`` run on when the user chose none, nor a data set or partition, and one of them
    declares a setting it needs (:attr:`~raysim.core.registry.MethodInfo.setting`); None where the user chose, or
    none declares one. Methods compared on one data set must not declare two."""
    chosen = any(key in layer.get("data", {}) for layer in layers for key in ("dataset", "partition"))
    settings = {get_method(m).setting for m in methods} - {None}
    if preset or chosen or not settings:
        return None
    if len(settings) > 1:
        raise ConfigError(
            f"{', '.join(methods)} need different settings ({', '.join(sorted(settings))}); pass --preset to choose one"
        )
    return settings.pop()


def setting_note(methods: list[str], setting: str) -> str:
    """What a run or comparison says when it takes a method's own setting (:func:`own_setting`)."""
    needing = [m for m in methods if get_method(m).setting == setting]
    reason = "needs client types" if get_method(needing[0]).needs_client_types else "needs its own setting"
    return (
        f"{'/'.join(needing)} {reason}: using the {setting} setting (--preset {setting}); pass --dataset/--partition "
        "or --preset to choose another"
    )


def parse_override(text: str) -> tuple[str, str, Any]:
    """``section.key=value`` -> (section, key, YAML-parsed value)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override {text!r} must look like section.key=value, e.g. federation.rounds=10")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    if not raw.strip():  # an unset shell variable after the =
        raise ConfigError(f"override {text!r} has no value after the =; give one (null for none)")
    try:
        value = yaml12.load(raw)
    except yaml12.RepeatedKey as error:
        raise ConfigError(f"override {text!r}: {error.problem}; give each key once") from None
    except yaml.YAMLError:  # not YAML: the text itself
        value = raw
    if isinstance(value, float) and math.isfinite(value) and repr(value) != raw.strip():
        value = raw.strip()  # 1.10, 1e-4 as typed: a text key keeps it whole, a number key reads it as its number
    if isinstance(value, dict) and not raw.strip().startswith("{"):  # NAME: or NAME: x, which YAML reads as a
        value = raw.strip()  # mapping, where no key takes one: the text, which the key's own check then explains
    return section, key, value


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity")


def _coerce(cls, key: str, value: Any, where: str) -> Any:
    hint = typing.get_type_hints(cls)[key]
    allowed = typing.get_args(hint) or (hint,)
    if value is None and type(None) in allowed:
        return None
    for typ in allowed:
        if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if typ is float and isinstance(value, str) and _is_float(value):  # "1e-4" given as text (a Python layer)
            return float(value)
        if typ is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ is bool and isinstance(value, bool):
            return value
        if typ is str and value is not None and not isinstance(value, (dict, list)):
            return str(value)
        if typ is tuple and isinstance(value, (list, tuple)):
            if any(isinstance(item, bool) or not isinstance(item, int) for item in value):
                raise ConfigError(f"{where}={shown(value)} must be a list of whole numbers, e.g. [0, 1, 2]")
            return tuple(value)
    if value is None:  # null in a preset, or --set KEY=null
        raise ConfigError(f"{where} is null; it takes {type_name(cls, key)}")
    raise ConfigError(f"{where}={shown(value)} has the wrong type; expected {type_name(cls, key)}")


def _build_section(cls, name: str, values: Mapping[str, Any]):
    valid = {f.name for f in fields(cls)}
    for key in values:
        if key not in valid:
            if not valid:  # a method without options of its own
                raise ConfigError(
                    f"unknown key {name}.{key}: {name} has no options of its own (a config key is "
                    "SECTION.KEY, e.g. train.lr)"
                )
            raise ConfigError(f"unknown key {name}.{key}; valid keys in {name}: {', '.join(sorted(valid))}")
    kwargs = {key: _coerce(cls, key, value, f"{name}.{key}") for key, value in values.items()}
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ConfigError(f"section {name}: {error}") from None
    except ConfigError as error:  # "eps=0 must be > 0" -> "fedvz.eps=0 must be > 0": the key as the user writes it
        message = str(error)
        if message.split("=", 1)[0] in valid:
            raise ConfigError(f"{name}.{message}") from None
        raise


def as_recorded(layer: Mapping[str, Any]) -> dict[str, Any]:
    """A config an earlier run recorded, as this version builds it: what that version took and ignored, and this one
    refuses, dropped (``data.data_dir`` of a built-in data set, which reads no files)."""
    data = layer.get("data", {})
    if data.get("data_dir") and data.get("dataset", DataConfig.dataset) not in FROM_DISK:
        return {**layer, "data": {k: v for k, v in data.items() if k != "data_dir"}}
    return dict(layer)


def build_config(method: str, layers: list[Mapping[str, Any]]) -> Config:
    """Merge layers (defaults < preset < CLI flags < --set) into a validated :class:`Config`."""
    info = get_method(method)
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    options: dict[str, Any] = {}
    for layer in layers:
        for section, values in layer.items():
            if section == "method":
                continue
            if section in SECTIONS:
                sections[section].update(values)
            elif section == info.options_key:
                options.update(values)
            else:
                valid = sorted(SECTIONS) + ([info.options_key] if fields(info.options) else [])
                raise ConfigError(
                    f"unknown section {section!r} for method {method}; valid sections: {', '.join(valid)}"
                )
    built = {name: _build_section(cls, name, sections[name]) for name, cls in SECTIONS.items()}
    built["options"] = _build_section(info.options, info.options_key, options)
    if built["train"].precision == "bf16" and not info.bf16:
        raise ConfigError(
            f"{method} needs float32 client compute ({info.fp32_reason}); use train.precision=fp32 or auto"
        )
    return Config(method=method, **built)


def check_runnable(config: Config) -> None:
    """The method's check of the whole config (:attr:`~raysim.core.registry.MethodInfo.check`: FGPT-U's K at most its
    G, FedGCR's T' at most the clients a round), a one-line ConfigError, for a config a run is about to start from
    (:func:`raysim.engine.setup.initial_state`, and ``raysim run`` at once); not for the configs a sweep builds
    before it samples (their defaults may be what the samples replace)."""
    check = get_method(config.method).check
    if check is not None:
        check(config)


def dump_yaml(config: Config) -> str:
    """The resolved config as YAML (saved with every run)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
