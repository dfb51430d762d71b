"""Run configuration: frozen dataclasses split by concern, YAML presets and ``key=value`` overrides.

Each section validates itself in ``__post_init__`` and :class:`Config` checks what spans sections, so a
config that exists is a valid one. Errors are :class:`~raysim.errors.ConfigError` with one line that says
how to fix the input. Method options live in a section named after the method's ``options_key``
(``fedprox.mu=0.1``) and are validated by the method's own ``Options`` dataclass.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from raysim.errors import ConfigError, unknown_name
from raysim.precision import PRECISIONS, native_bf16_cpu, resolve

DEFAULT_TRACKING_DIR = "raysim-runs"


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


BAD_UPDATE_POLICIES = ("reject", "fail")


@dataclass(frozen=True)
class FederationConfig:
    """Who trains when: M clients, participation ratio, rounds, evaluation cadence, seed, and what happens to a
    client update with NaN/Inf or the wrong shapes (``bad_updates``: "reject" it and aggregate the rest, or "fail")."""

    clients: int = 100
    rounds: int = 30
    participation: float = 0.1
    eval_every: int = 2
    unseen_fraction: float = 0.0
    seed: int = 0
    bad_updates: str = "reject"

    def __post_init__(self):
        _check(self.clients >= 1, f"federation.clients={self.clients} must be at least 1")
        _check(self.bad_updates in BAD_UPDATE_POLICIES,
               f"federation.bad_updates={self.bad_updates!r} is not one of {', '.join(BAD_UPDATE_POLICIES)}")
        _check(self.rounds >= 1, f"federation.rounds={self.rounds} must be at least 1")
        _check(0 < self.participation <= 1,
               f"participation={self.participation} must be in (0, 1], e.g. 0.1 for 10% of clients per round")
        _check(self.eval_every >= 1, f"eval_every={self.eval_every} must be at least 1")
        _check(0 <= self.unseen_fraction < 1,
               f"federation.unseen_fraction={self.unseen_fraction} must be in [0, 1)")

    @property
    def clients_per_round(self) -> int:
        """m = round(participation * trainable clients), at least 1."""
        return max(1, round(self.participation * self.trainable_clients))

    @property
    def unseen_clients(self) -> int:
        """Number of held-out clients that never train (at least 1 when the fraction is positive)."""
        return max(1, round(self.unseen_fraction * self.clients)) if self.unseen_fraction > 0 else 0

    @property
    def trainable_clients(self) -> int:
        return self.clients - self.unseen_clients


@dataclass(frozen=True)
class TrainConfig:
    """Local training on a client: epochs, batch size, the client optimiser, and the precision of client compute
    (``auto``: bf16 autocast where the CPU has native bf16 and the method allows it, else fp32; see
    :mod:`raysim.precision`)."""

    local_epochs: int = 1
    batch_size: int = 16
    optimizer: str = "adamw"
    lr: float = 3e-3
    momentum: float = 0.9
    weight_decay: float = 1e-5
    precision: str = "auto"

    def __post_init__(self):
        _check(self.precision in PRECISIONS,
               f"train.precision={self.precision!r} is not one of {', '.join(PRECISIONS)}")
        _check(self.local_epochs >= 1, f"local_epochs={self.local_epochs} must be at least 1")
        _check(self.batch_size >= 1, f"train.batch_size={self.batch_size} must be at least 1")
        _check(self.optimizer in ("sgd", "adamw"),
               f"train.optimizer={self.optimizer!r} is not supported; use 'sgd' or 'adamw'")
        _check(self.lr > 0, f"train.lr={self.lr} must be positive")
        _check(0 <= self.momentum < 1, f"train.momentum={self.momentum} must be in [0, 1)")
        _check(self.weight_decay >= 0, f"train.weight_decay={self.weight_decay} must be >= 0")


@dataclass(frozen=True)
class ModelConfig:
    """The frozen backbone: a timm name, and where its weights come from.

    ``pretrained`` loads the weights that ship with raysim (the offline default, checked by SHA-256) or,
    for timm's names, the hub's; ``weights`` (a local safetensors file) takes precedence over both.
    """

    backbone: str = "raysim_vit_tiny_p4_32"
    weights: str | None = None
    pretrained: bool = True

    def __post_init__(self):
        if self.weights is not None:
            path = Path(self.weights)
            _check(path.is_file(), f"weights file {self.weights} does not exist; pass a safetensors file "
                                   f"saved from backbone {self.backbone}")


@dataclass(frozen=True)
class DataConfig:
    """The data source and how it is partitioned over clients (see ``raysim ls datasets|partitions``)."""

    dataset: str = "glyphs62"
    partition: str = "dirichlet"
    data_dir: str | None = None
    image_size: int | None = None
    s: int = 2
    alpha: float = 0.5
    beta: float = 0.5
    beta_fine: float = 10.0
    dif: float = 1.0
    min_train_samples: int = 1

    def __post_init__(self):
        from raysim.data.partition import PARTITIONERS
        from raysim.data.sources import SOURCES

        _check(self.dataset in SOURCES, str(unknown_name("dataset", self.dataset, SOURCES)))
        _check(self.partition in PARTITIONERS, str(unknown_name("partition", self.partition, PARTITIONERS)))
        _check(self.image_size is None or self.image_size >= 4,
               f"data.image_size={self.image_size} must be at least 4 pixels (or null for the source's size)")
        _check(self.s >= 1, f"data.s={self.s} must be at least 1 (classes per client)")
        _check(self.alpha > 0, f"data.alpha={self.alpha} must be > 0 (Dirichlet concentration)")
        _check(self.beta > 0 and self.beta_fine > 0, "data.beta and data.beta_fine must be > 0")
        _check(self.dif >= 1, f"data.dif={self.dif} must be >= 1 (1 means balanced domains)")
        _check(self.min_train_samples >= 1, "data.min_train_samples must be at least 1")


@dataclass(frozen=True)
class ResourceConfig:
    """Where client work runs: backend, worker pool size and per-worker resources, Ray address; for split
    learning (FedV/FedVZ) the ``SplitServer`` actor's resources (it mostly serves while clients wait: 0 CPU)."""

    backend: str = "ray"
    workers: int = 0
    cpus_per_client: float = 1.0
    gpus_per_client: float = 0.0
    address: str | None = None
    dashboard_host: str = "127.0.0.1"
    server_cpus: float = 0.0
    server_gpus: float = 0.0

    def __post_init__(self):
        _check(self.backend in ("ray", "sequential"),
               f"resources.backend={self.backend!r} is not supported; use 'ray' or 'sequential'")
        _check(self.workers >= 0, f"workers={self.workers} must be >= 0 (0 picks one per free CPU)")
        _check(self.cpus_per_client >= 0, f"cpus_per_client={self.cpus_per_client} must be >= 0")
        _check(self.gpus_per_client >= 0, f"gpus_per_client={self.gpus_per_client} must be >= 0")
        _check(self.server_cpus >= 0 and self.server_gpus >= 0,
               "resources.server_cpus and resources.server_gpus (split learning's encoder server) must be >= 0")

    @property
    def torch_threads(self) -> int:
        """Threads each client worker gives torch; the same on every backend, so numbers match."""
        return max(1, int(self.cpus_per_client))


@dataclass(frozen=True)
class TrackingConfig:
    """The MLflow store, experiment and run name."""

    tracking_uri: str | None = None
    experiment: str = "raysim"
    run_name: str | None = None

    @property
    def resolved_uri(self) -> str:
        """The given URI, or a SQLite file under ./raysim-runs."""
        if self.tracking_uri:
            return self.tracking_uri
        return f"sqlite:///{(Path.cwd() / DEFAULT_TRACKING_DIR / 'mlflow.db').as_posix()}"


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints for exact resume (``raysim run --resume``): every ``every`` rounds (0: only when the run stops
    early or finishes), the ``keep`` newest kept (0: all), under ``dir`` (default: ``checkpoints/`` beside the
    SQLite store, else ``./raysim-runs/checkpoints``), one folder per MLflow run."""

    every: int = 1
    keep: int = 2
    dir: str | None = None

    def __post_init__(self):
        _check(self.every >= 0, f"checkpoint.every={self.every} must be >= 0 (0 writes one only when the run stops)")
        _check(self.keep >= 0, f"checkpoint.keep={self.keep} must be >= 0 (0 keeps every checkpoint)")

    def root(self, tracking_uri: str) -> Path:
        """The folder that holds one sub-folder of checkpoints per run."""
        if self.dir:
            return Path(self.dir).expanduser().resolve()
        return beside_store(tracking_uri) / "checkpoints"


def beside_store(tracking_uri: str) -> Path:
    """Where raysim keeps a run's files besides MLflow's: the SQLite store's folder, else ./raysim-runs."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):]).resolve().parent
    return Path.cwd() / DEFAULT_TRACKING_DIR


@dataclass(frozen=True)
class NoOptions:
    """A method without options of its own."""


SECTIONS = {
    "federation": FederationConfig,
    "train": TrainConfig,
    "model": ModelConfig,
    "data": DataConfig,
    "resources": ResourceConfig,
    "tracking": TrackingConfig,
    "checkpoint": CheckpointConfig,
}


@dataclass(frozen=True)
class Config:
    """A whole, validated run configuration."""

    method: str
    federation: FederationConfig = field(default_factory=FederationConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    options: Any = field(default_factory=NoOptions)

    def __post_init__(self):
        workers = self.resources.workers
        _check(workers <= self.federation.clients,
               f"workers={workers} is more than the {self.federation.clients} clients; use --workers "
               f"{min(self.federation.clients, 2)} or fewer")

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict (YAML-able), method options under the method's options key."""
        from raysim.registry import get_method

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
    for entry in sorted(resources.files("raysim.presets").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            first = entry.read_text().splitlines()[0] if entry.read_text() else ""
            out[entry.name[: -len(".yaml")]] = first.lstrip("# ").strip()
    return out


def load_preset(name_or_path: str) -> dict[str, Any]:
    """A preset by name (``raysim ls presets``) or a YAML file path, as a nested dict."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"preset file {name_or_path} does not exist")
        text = path.read_text()
    elif name_or_path in presets():
        text = resources.files("raysim.presets").joinpath(f"{name_or_path}.yaml").read_text()
    else:
        raise unknown_name("preset", name_or_path, presets())
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"preset {name_or_path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) or k == "method" for k, v in data.items()):
        raise ConfigError(f"preset {name_or_path} must map section names to mappings, e.g. 'federation: {{rounds: 10}}'")
    return data


def preset_for_method(preset: Mapping[str, Any], method: str) -> dict[str, Any]:
    """A preset's layer for ``method``: option sections of other registered methods are dropped, so one
    preset (a paper's setting) can carry the options of every method it is run with."""
    from raysim.registry import get_method, load_methods

    own = get_method(method).options_key
    others = {cls.options_key for cls in load_methods().values()} - {own}
    return {key: value for key, value in preset.items() if key not in others}


def parse_override(text: str) -> tuple[str, str, Any]:
    """``section.key=value`` -> (section, key, YAML-parsed value)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override {text!r} must look like section.key=value, e.g. federation.rounds=10")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
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
        if typ is float and isinstance(value, str) and _is_float(value):  # YAML 1.1 reads 1e-4 as a string
            return float(value)
        if typ is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ is bool and isinstance(value, bool):
            return value
        if typ is str and value is not None and not isinstance(value, (dict, list)):
            return str(value)
        if typ is tuple and isinstance(value, (list, tuple)):
            return tuple(value)
    names = "/".join(getattr(t, "__name__", str(t)) for t in allowed)
    raise ConfigError(f"{where}={value!r} has the wrong type; expected {names}")


def _build_section(cls, name: str, values: Mapping[str, Any]):
    valid = {f.name for f in fields(cls)}
    for key in values:
        if key not in valid:
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


def build_config(method: str, layers: list[Mapping[str, Any]]) -> Config:
    """Merge layers (defaults < preset < CLI flags < --set) into a validated :class:`Config`."""
    from raysim.registry import get_method

    method_cls = get_method(method)
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    options: dict[str, Any] = {}
    for layer in layers:
        for section, values in layer.items():
            if section == "method":
                continue
            if section in SECTIONS:
                sections[section].update(values)
            elif section == method_cls.options_key:
                options.update(values)
            else:
                valid = sorted(SECTIONS) + ([method_cls.options_key] if fields(method_cls.Options) else [])
                raise ConfigError(f"unknown section {section!r} for method {method}; valid sections: "
                                  f"{', '.join(valid)}")
    built = {name: _build_section(cls, name, sections[name]) for name, cls in SECTIONS.items()}
    built["options"] = _build_section(method_cls.Options, method_cls.options_key, options)
    built["train"] = _resolve_precision(method_cls, built["train"], built["resources"])
    return Config(method=method, **built)


def _resolve_precision(method_cls, train: TrainConfig, res: ResourceConfig) -> TrainConfig:
    """``train.precision`` made concrete on this (the driver's) machine; bf16 refused where the method needs fp32."""
    if train.precision == "bf16" and not method_cls.mixed_precision:
        raise ConfigError(f"{method_cls.name} needs float32 client compute ({method_cls.mixed_precision_note}); "
                          f"use train.precision=fp32 or auto")
    precision = resolve(train.precision, method_allows=method_cls.mixed_precision,
                        on_gpu=res.gpus_per_client > 0, native_cpu=native_bf16_cpu)
    return dataclasses.replace(train, precision=precision)


def dump_yaml(config: Config) -> str:
    """The resolved config as YAML (saved with every run)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
