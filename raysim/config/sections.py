"""The config sections: frozen dataclasses split by concern, each key declared once with
:func:`~raysim.base.settings.setting`.

A key's metadata carries its help, its CLI flag (the CLI generates its options from it) and its checks (run in
``__post_init__``), so the dataclass, the CLI and the validation cannot drift. Errors are
:class:`~raysim.base.errors.ConfigError` with one line naming the key as the user writes it and how to fix it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from raysim.base.errors import ConfigError, unknown_name
from raysim.base.paths import absolute, lower_scheme, sqlite_file, why_not_a_file
from raysim.base.settings import (
    FLOAT32_MAX,
    MAX_THREADS,
    NAME_CHARACTERS,
    NON_NEGATIVE,
    POSITIVE,
    at_least,
    at_most,
    differs,
    positive,
    setting,
    validate,
)
from raysim.data import FROM_DISK
from raysim.data.partition import CLASS_SETS, PACHINKO_FORMS, PARTITIONERS
from raysim.data.sources import SOURCES
from raysim.ops.codecs import parse as parse_codec
from raysim.ops.staleness import parse_staleness
from raysim.systems import traces
from raysim.systems.distributions import parse_distribution
from raysim.systems.tiers import parse_tiers

DEFAULT_TRACKING_DIR = "raysim-runs"
PRECISIONS = ("auto", "fp32", "bf16")  # client compute; auto is resolved by the driver (raysim.base.precision)
BAD_UPDATE_POLICIES = ("reject", "fail")
STRAGGLER_POLICIES = ("drop", "wait", "partial")
SAMPLINGS = ("fixed", "poisson")
FEDERATION_MODES = ("sync", "async")
ASYNC_KEYS = ("concurrency", "buffer", "staleness", "server_lr", "async_alpha")  # federation.mode=async's own
PRIVACY_MODES = ("none", "user", "record")
NOISE_ADDERS = ("server", "clients")  # privacy.noise_by: who adds user-level DP's Gaussian noise
ACCOUNTANTS = ("rdp", "pld")
RESOURCE_UNIT = 1e-4  # the finest CPU or GPU share Ray reserves


def half_up(x: float) -> int:
    """x rounded to the nearest integer, halves up (Python's ``round`` takes them to the even one: 2.5 -> 2); a
    product such as 0.15 * 30 that floating point leaves a hair under a half still rounds up."""
    return math.floor(x + 0.5 + 1e-9)


def flagged_fields(cls) -> list:
    """The fields of a section that have a CLI flag."""
    return [spec for spec in fields(cls) if spec.metadata.get("flag")]


@dataclass(frozen=True)
class FederationConfig:
    """Who trains when: M clients, participation ratio, rounds, evaluation cadence, seed, and what happens to a
    client update with NaN/Inf or the wrong shapes."""

    clients: int = setting(100, "Number of clients M.", flag="--clients", checks=(at_least(1),))
    rounds: int = setting(30, "Communication rounds T.", flag="--rounds", checks=(at_least(1),))
    participation: float = setting(
        0.1,
        "Share of clients sampled per round, in (0, 1].",
        flag="--participation",
        checks=((lambda v: 0 < v <= 1, "must be in (0, 1], e.g. 0.1 for 10% of clients per round"),),
    )
    eval_every: int = setting(
        2, "Evaluate every k rounds (always after the last).", flag="--eval-every", checks=(at_least(1),)
    )
    unseen_fraction: float = setting(
        0.0,
        "Share of clients held out: they never train, evaluated with the global model (unseen_acc).",
        checks=((lambda v: 0 <= v < 1, "must be in [0, 1)"),),
    )
    seed: int = setting(0, "The run seed; every random draw derives from it.", flag="--seed", checks=(NON_NEGATIVE,))
    eval_clients: int = setting(
        10_000,
        "Clients evaluated on evaluated rounds: all of them up to this many, else a fixed sample of this many, drawn "
        "once from the run seed (0: always all).",
        checks=(NON_NEGATIVE,),
    )
    bad_updates: str = setting(
        "reject",
        "An update with NaN/Inf or the wrong shapes: reject it and aggregate the rest, or fail the run.",
        choices=BAD_UPDATE_POLICIES,
    )
    deadline_s: float = setting(
        0.0,
        "Round deadline in virtual seconds (0: none); a client that finishes later is a straggler "
        "(federation.stragglers; docs/systems.md).",
        checks=((lambda v: v >= 0, "must be >= 0 (0: no deadline)"),),
    )
    stragglers: str = setting(
        "drop",
        "What a straggler's update becomes: dropped, waited for, or its partial work up to the deadline.",
        choices=STRAGGLER_POLICIES,
    )
    over_select: float = setting(
        0.0,
        "Select ceil((1 + f) m) clients and keep the first m to finish (production FL's over-selection).",
        checks=(NON_NEGATIVE,),
    )
    sampling: str = setting(
        "fixed",
        "How a round's clients are drawn: 'fixed', m of them uniformly without replacement, or 'poisson', each "
        "independently with probability m / (trainable clients), so the cohort's size varies (the sampling "
        "DP-FedAvg's accounting assumes; privacy.*).",
        choices=SAMPLINGS,
    )
    mode: str = setting(
        "sync",
        "'sync': rounds of a cohort; 'async': clients train all the time and the server aggregates every "
        "federation.buffer arrived updates, weighted by their staleness (FedBuff; FedAsync with buffer 1; "
        "docs/how-to/async.md). --rounds then counts server versions.",
        choices=FEDERATION_MODES,
    )
    concurrency: int = setting(
        0, "Asynchronous mode: clients training at any time (0: m, the clients a round).", checks=(NON_NEGATIVE,)
    )
    buffer: int = setting(
        0,
        "Asynchronous mode: arrived updates per server version, K (0: m, at most the concurrency; 1: FedAsync's "
        "mixing, else FedBuff's buffered step).",
        checks=(NON_NEGATIVE,),
    )
    staleness: str = setting(
        "polynomial:0.5",
        "Asynchronous mode: an update's weight s after tau server versions (FedAsync's: s(tau + 1), Xie et al.'s "
        "t - tau): constant, polynomial:A ((1 + tau)^-A) or hinge:A,B (1 up to B, then 1 / (A (tau - B) + 1)).",
    )
    server_lr: float = setting(
        1.0,
        "Asynchronous mode with buffer > 1: FedBuff's server learning rate on the buffer's mean update.",
        checks=(POSITIVE,),
    )
    async_alpha: float = setting(
        0.6,
        "Asynchronous mode with buffer 1: FedAsync's mixing weight alpha, times the staleness weight.",
        checks=((lambda v: 0 < v <= 1, "must be in (0, 1], e.g. 0.6"),),
    )

    def __post_init__(self):
        validate(self)
        try:
            parse_staleness(self.staleness)
        except ValueError as error:
            raise ConfigError(f"federation.staleness={error}") from None
        self._check_async()
        if differs(self, "stragglers") and not self.deadline_s > 0:
            raise ConfigError(
                f"federation.stragglers={self.stragglers} is set but does nothing without a round deadline (a "
                "straggler is a client that misses it); set federation.deadline_s, in synchronous rounds"
            )
        if self.trainable_clients < 1:
            fix = f"lower it below {(self.clients - 0.5) / self.clients:.3g}" if self.clients > 1 else "set it to 0"
            raise ConfigError(
                f"federation.unseen_fraction={self.unseen_fraction} holds out "
                f"{f'all {self.clients} clients' if self.clients > 1 else 'the only client'}; "
                f"{fix} or add clients"
            )

    def _check_async(self) -> None:
        """Asynchronous mode's keys: none set in synchronous mode, and a buffer the clients in flight can fill."""
        if self.mode == "sync":
            unused = [key for key in ASYNC_KEYS if differs(self, key)]
            if unused:
                raise ConfigError(f"federation.{unused[0]} is set but does nothing without federation.mode=async")
            return
        if self.concurrency > self.trainable_clients:
            raise ConfigError(
                f"federation.concurrency={self.concurrency} is more than the {self.trainable_clients} trainable "
                f"clients; lower it"
            )
        if self.buffer_size > self.concurrent_clients:
            raise ConfigError(
                f"federation.buffer={self.buffer_size} is more than the {self.concurrent_clients} clients in flight "
                f"(federation.concurrency); a buffer fills from clients in flight, so lower it or raise concurrency"
            )
        if self.buffer_size == 1 and differs(self, "server_lr"):
            raise ConfigError(
                "federation.server_lr is FedBuff's (buffer > 1); FedAsync (buffer 1) mixes with federation.async_alpha"
            )
        if self.buffer_size > 1 and differs(self, "async_alpha"):
            raise ConfigError(
                "federation.async_alpha is FedAsync's (federation.buffer=1); FedBuff (buffer > 1) "
                "steps with federation.server_lr"
            )
        if self.deadline_s > 0 or self.over_select > 0:
            raise ConfigError(
                "federation.deadline_s and federation.over_select shape synchronous rounds; unset them with "
                "federation.mode=async (the server never waits for a cohort)"
            )
        if self.sampling != "fixed":
            raise ConfigError("federation.sampling=poisson draws a round's cohort; unset it with federation.mode=async")

    @property
    def asynchronous(self) -> bool:
        return self.mode == "async"

    def evaluates(self, round: int) -> bool:
        """Whether ``round`` is evaluated: every ``eval_every``-th round and the last."""
        return round % self.eval_every == 0 or round == self.rounds

    @property
    def concurrent_clients(self) -> int:
        """C, the clients training at any time in asynchronous mode: ``concurrency``, or m."""
        return self.concurrency or self.clients_per_round

    @property
    def buffer_size(self) -> int:
        """K, the arrived updates a server version aggregates in asynchronous mode: ``buffer``, or the smaller of m
        and C."""
        return self.buffer or min(self.clients_per_round, self.concurrent_clients)

    @property
    def clients_per_round(self) -> int:
        """m = round(participation * trainable clients), halves up (4.5 -> 5), at least 1."""
        return max(1, half_up(self.participation * self.trainable_clients))

    @property
    def unseen_clients(self) -> int:
        """Number of held-out clients that never train (at least 1 when the fraction is positive), halves up."""
        return max(1, half_up(self.unseen_fraction * self.clients)) if self.unseen_fraction > 0 else 0

    @property
    def trainable_clients(self) -> int:
        return self.clients - self.unseen_clients

    @property
    def clients_selected(self) -> int:
        """The clients selected each round: m, or ceil((1 + over_select) m) with over-selection."""
        return math.ceil(round((1 + self.over_select) * self.clients_per_round, 9))

    @property
    def evaluates_a_sample(self) -> bool:
        """Whether evaluation covers a fixed sample of ``eval_clients`` clients rather than all of them."""
        return bool(self.eval_clients) and self.clients > self.eval_clients


ADAMW_BETA1 = 0.9  # torch's, which the clients' AdamW keeps


@dataclass(frozen=True)
class TrainConfig:
    """Local training on a client: epochs, batch size, the client optimiser, and the precision of client compute."""

    local_epochs: int = setting(1, "Local epochs E per round.", flag="--local-epochs", checks=(at_least(1),))
    batch_size: int = setting(16, "Local batch size.", checks=(at_least(1),))
    optimizer: str = setting("adamw", "The client optimiser.", choices=("sgd", "adamw"))
    lr: float = setting(3e-3, "The client learning rate.", checks=(POSITIVE,))
    momentum: float = setting(
        0.9,
        "SGD momentum (train.optimizer=sgd; AdamW keeps torch's betas).",
        checks=((lambda v: 0 <= v < 1, "must be in [0, 1)"),),
    )
    weight_decay: float = setting(1e-5, "Weight decay of the client optimiser.", checks=(NON_NEGATIVE,))
    cohort: str = setting(
        "auto",
        "Train several clients of a worker together (one forward over their batches; methods that support it): on, "
        "off, or auto: on where clients train on a GPU (on CPUs a client's batch already fills the cores: measured "
        "slower, with activations growing with the cohort).",
        choices=("auto", "on", "off"),
    )
    cohort_size: int = setting(
        8, "Clients per cohort: the round's clients, in order, in groups of this many.", checks=(at_least(1),)
    )
    precision: str = setting(
        "auto",
        "Client compute: bf16 autocast or fp32; auto is fp32 (bf16 pays only on CPUs with AVX-512 BF16/AMX, GPUs).",
        flag="--precision",
        choices=PRECISIONS,
    )

    def __post_init__(self):
        validate(self)
        first_step = self.lr / (1 - ADAMW_BETA1)  # AdamW's bias-corrected step size at step 1
        if self.optimizer == "adamw" and first_step > FLOAT32_MAX:
            raise ConfigError(
                f"train.lr={self.lr:g} overflows float32 in AdamW's first step (lr / (1 - {ADAMW_BETA1}) = "
                f"{first_step:.3g}, beyond 3.4e38); pass a smaller train.lr"
            )


@dataclass(frozen=True)
class ModelConfig:
    """The frozen backbone: a timm name, and where its weights come from.

    ``pretrained`` loads the weights that ship with raysim (the offline default, checked by SHA-256) or, for timm's
    names, the hub's; ``weights`` (a local safetensors file) takes precedence over both.
    """

    backbone: str = setting("raysim_vit_tiny_p4_32", "timm ViT name (raysim ls backbones).", flag="--backbone")
    weights: str | None = setting(None, "Backbone weights, a local safetensors file.", flag="--weights")
    pretrained: bool = setting(True, "Load pretrained weights (shipped, or the hub's for timm names).")

    def __post_init__(self):
        if self.weights is None:
            return
        object.__setattr__(self, "weights", absolute(self.weights))  # a run resumed from elsewhere loads this file
        if not Path(self.weights).is_file():
            raise ConfigError(
                f"weights file {self.weights} {why_not_a_file(self.weights)}; pass a safetensors file saved from "
                f"backbone {self.backbone}"
            )


@dataclass(frozen=True)
class DataConfig:
    """The data source and how it is partitioned over clients (see ``raysim ls datasets|partitions``)."""

    dataset: str = setting("glyphs62", "Data source (raysim ls datasets).", flag="--dataset")
    partition: str = setting("dirichlet", "How data is split over clients (raysim ls partitions).", flag="--partition")
    data_dir: str | None = setting(None, "Folder or file for datasets read from disk.", flag="--data-dir")
    image_size: int | None = setting(
        None,
        "Resize every image to RGB N x N (null: the source's size).",
        checks=(at_least(4), at_most(4096, "a client's batch holds N^2 pixels a row; 224 is ImageNet's")),
    )
    s: int = setting(2, "Pathological: classes per client.", checks=(at_least(1),))
    class_sets: str = setting(
        "random",
        "Pathological: each client's s classes drawn at random among those with the most holder slots left "
        "(SGPT App. E.1, after pFedHN; the combinations vary), or 'ring': s consecutive classes of one shuffled "
        "ring (C / gcd(s, C) distinct sets at most, 31 on offline-s10).",
        choices=tuple(CLASS_SETS),
    )
    alpha: float = setting(0.5, "Dirichlet concentration over labels.", checks=(POSITIVE,))
    beta: float = setting(0.5, "Pachinko: Dirichlet concentration over coarse labels.", checks=(POSITIVE,))
    beta_fine: float = setting(10.0, "Pachinko: Dirichlet concentration over fine labels.", checks=(POSITIVE,))
    pachinko: str = setting(
        "reddi",
        "Pachinko: 'reddi', every client's N // M rows drawn one at a time from its coarse and fine multinomials, a "
        "label leaving the draw when its rows run out (Reddi et al. 2021, App. C, which FGPT cites), or "
        "'proportional', each class split over the clients in proportion to their drawn probabilities of it, so "
        "client sizes vary.",
        choices=PACHINKO_FORMS,
    )
    dif: float = setting(1.0, "Domains: the domain imbalance factor (1 is balanced).", checks=(at_least(1),))
    domain_order: str = setting(
        "paper",
        "Domains: which domain gets the most clients under a DIF: 'paper', the dataset's order as FedGCR's authors "
        "give it (Digit-Five: MNIST first, SVHN the rarest), or 'id', by domain id.",
        choices=("paper", "id"),
    )
    domain_sizes: str = setting(
        "full",
        "Domains under a DIF: 'full', every domain's rows all dealt, equally among its clients (FedGCR's text sets "
        "only the client counts), or 'geometric', as FedGCR's authors' code: with r = dif^(1/(D-1)) the k-th domain "
        "keeps r^-k of its training rows and its j-th client holds r^j parts of them (test rows: all, equally among "
        "a domain's clients).",
        choices=("full", "geometric"),
    )
    min_train_samples: int = setting(1, "Fewest training rows a client may hold.", checks=(at_least(1),))
    holdout: str = setting(
        "test",
        "The rows evaluation scores: 'test', the data set's test split, or 'validation', a fixed fifth of every "
        "(domain, class) cell of its training rows, the test rows left out (raysim compare --tune-budget tunes on "
        "it, so its picks are never chosen on the test images).",
        choices=("test", "validation"),
    )

    def __post_init__(self):
        if self.dataset not in SOURCES:
            raise unknown_name("dataset", self.dataset, SOURCES)
        if self.partition not in PARTITIONERS:
            raise unknown_name("partition", self.partition, PARTITIONERS)
        validate(self)
        if self.data_dir and self.dataset not in FROM_DISK:
            raise ConfigError(
                f"data.data_dir={self.data_dir} is set but dataset {self.dataset!r} is built in and reads no files; "
                "drop --data-dir, or pick a dataset read from disk (raysim ls datasets)"
            )
        if self.data_dir:  # absolute: a run resumed or replayed from another folder reads the same data
            object.__setattr__(self, "data_dir", absolute(self.data_dir))


@dataclass(frozen=True)
class SystemsConfig:
    """Each client's device, for the virtual clock (docs/systems.md): compute speed in samples/s and link in bytes/s,
    each a number, ``uniform:LOW,HIGH`` or ``lognormal:MU,SIGMA`` (ln of the value), drawn per client from the run
    seed, or a trace file's columns; the chance a client fails mid-round; the capacity tier that decides what a
    client trains and sends. All unset: clients cost no time and train everything."""

    speed: str | None = setting(None, "Client compute in samples/s, e.g. lognormal:3,0.5 (null: no compute time).")
    downlink: str | None = setting(None, "Client download bandwidth in bytes/s, e.g. 1e6 (null: instant).")
    uplink: str | None = setting(None, "Client upload bandwidth in bytes/s, e.g. uniform:1e5,1e6 (null: instant).")
    trace: str | None = setting(
        None, "CSV or parquet of client devices and online intervals, or a shipped one: example (docs/systems.md)."
    )
    dropout: float = setting(
        0.0,
        "Chance that a selected client fails mid-round, per client and round, from the run seed.",
        checks=((lambda v: 0 <= v < 1, "must be in [0, 1), e.g. 0.1"),),
    )
    tiers: str | None = setting(
        None,
        "Capacity tiers drawn per client from the run seed, e.g. head,last-2,all (head, first-K, last-K, all; "
        "null: every client trains everything).",
    )

    def __post_init__(self):
        validate(self)
        for name in ("speed", "downlink", "uplink"):
            if getattr(self, name) is not None:
                parse_distribution(name, getattr(self, name))
        if self.trace is not None:
            traces.resolve(self.trace)
        if self.tiers is not None:
            parse_tiers(self.tiers)

    @property
    def modelled(self) -> bool:
        """Whether any device property is set (else the clock only runs when federation sets a deadline)."""
        names = ("speed", "downlink", "uplink", "trace")
        return any(getattr(self, name) is not None for name in names) or bool(self.dropout)


@dataclass(frozen=True)
class ResourceConfig:
    """Where client work runs: backend, worker pool size and per-worker resources, Ray address; for split
    learning (FedV/FedVZ) the server's resources (it mostly serves while clients wait: 0 CPU)."""

    backend: str = setting("ray", "Where clients run.", flag="--backend", choices=("ray", "sequential"))
    workers: int = setting(
        0, "Size of the client worker pool (0: one per free CPU).", flag="--workers", checks=(NON_NEGATIVE,)
    )
    cpus_per_client: float = setting(
        1.0,
        "CPUs each worker reserves (fractions allowed).",
        flag="--cpus-per-client",
        checks=(NON_NEGATIVE, at_most(MAX_THREADS, "a worker's torch threads follow its CPUs")),
    )
    gpus_per_client: float = setting(
        0.0,
        "GPUs each worker reserves (fractions allowed, e.g. 0.25).",
        flag="--gpus-per-client",
        checks=(NON_NEGATIVE,),
    )
    address: str | None = setting(
        None, "Ray cluster to join ('auto', 'HOST:PORT' or 'ray://HOST:10001').", flag="--address"
    )
    threads: int = setting(
        0,
        "Torch threads per client worker (0: its CPUs, at least 1; $RAYSIM_TORCH_THREADS).",
        checks=(NON_NEGATIVE, at_most(MAX_THREADS, "torch threads in one worker")),
    )
    dashboard: bool = setting(False, "Start Ray's dashboard with a local Ray (on dashboard_host).", flag="--dashboard")
    dashboard_host: str = setting("127.0.0.1", "Where a local Ray's dashboard listens (with --dashboard).")
    server_cpus: float = setting(0.0, "CPUs of split learning's server.", checks=(NON_NEGATIVE,))
    server_gpus: float = setting(0.0, "GPUs of split learning's server.", checks=(NON_NEGATIVE,))

    def __post_init__(self):
        validate(self)
        for key in ("cpus_per_client", "gpus_per_client", "server_cpus", "server_gpus"):
            value = getattr(self, key)
            if 0 < value < RESOURCE_UNIT:  # Ray counts resources in units of 1e-4 and refuses a finer request
                raise ConfigError(f"{key}={value:g} is finer than Ray's unit of {RESOURCE_UNIT:g}; use 0 or more")
        if self.backend == "ray" and self.cpus_per_client == 0 and self.gpus_per_client == 0:
            raise ConfigError(
                "cpus_per_client=0 with gpus_per_client=0 reserves nothing for a worker, which Ray refuses; give "
                "--cpus-per-client (e.g. 0.5) or --gpus-per-client"
            )

    @property
    def torch_threads(self) -> int:
        """Threads each client worker gives torch (the same on every backend, so numbers match): ``threads``, or the
        worker's CPUs (at least 1) before the driver resolved it."""
        return self.threads or max(1, int(self.cpus_per_client))


@dataclass(frozen=True)
class TrackingConfig:
    """The MLflow store, experiment and run name."""

    tracking_uri: str | None = setting(
        None,
        "MLflow store (default sqlite:///./raysim-runs/mlflow.db).",
        flag="--tracking-uri",
        checks=((str.strip, "must not be empty; leave it out for the default store"),),
    )
    experiment: str = setting(
        "raysim",
        "MLflow experiment name.",
        flag="--experiment",
        checks=(
            (str.strip, "must not be empty"),
            (
                lambda v: len(v) <= NAME_CHARACTERS,
                f"must be at most {NAME_CHARACTERS} characters (it names a comparison's folder too)",
            ),
        ),
    )
    run_name: str | None = setting(
        None,
        "MLflow run name (default: method, a config hash, seed, data, partition and clients).",
        flag="--run-name",
        checks=((str.strip, "must not be empty; leave it out for raysim's name"),),
    )

    def __post_init__(self):
        validate(self)

    @property
    def resolved_uri(self) -> str:
        """The given URI, its scheme in lower case (a SQLite file's path made absolute, so that a run resumed from
        another folder finds its store), or a SQLite file under ./raysim-runs."""
        given = lower_scheme(self.tracking_uri) if self.tracking_uri else None
        store = sqlite_file(given) if given else Path.cwd() / DEFAULT_TRACKING_DIR / "mlflow.db"
        if store is None:  # a server
            return given
        return f"sqlite:///{store.expanduser().absolute().as_posix()}"


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints for exact resume (``raysim run --resume``): every ``every`` rounds (0: only when the run stops
    early or finishes), the ``keep`` newest kept (0: all), under ``dir`` (default: ``checkpoints/`` beside the
    SQLite store, else ``./raysim-runs/checkpoints``), one folder per MLflow run."""

    every: int = setting(1, "Write a checkpoint every k rounds (0: only when the run stops).", checks=(NON_NEGATIVE,))
    keep: int = setting(2, "Keep the k newest checkpoints (0: all).", checks=(NON_NEGATIVE,))
    dir: str | None = setting(None, "Where checkpoints go (default: beside the SQLite store).")

    def __post_init__(self):
        validate(self)

    def root(self, tracking_uri: str) -> Path:
        """The folder that holds one sub-folder of checkpoints per run."""
        if self.dir:
            return Path(absolute(self.dir))
        return beside_store(tracking_uri) / "checkpoints"


def beside_store(tracking_uri: str) -> Path:
    """Where raysim keeps a run's files besides MLflow's: the SQLite store's folder, else ./raysim-runs."""
    store = sqlite_file(tracking_uri)
    return store.resolve().parent if store is not None else Path.cwd() / DEFAULT_TRACKING_DIR


@dataclass(frozen=True)
class PrivacyConfig:
    """Differential privacy and secure aggregation (docs/how-to/privacy.md): user-level DP as DP-FedAvg (McMahan et al.,
    ICLR 2018) with fixed or adaptive clipping (Andrew et al., NeurIPS 2021), record-level DP-SGD inside each client
    (Abadi et al., CCS 2016), accounted with Google's dp-accounting; secure aggregation's view of the cohort's sum
    (Bell et al., CCS 2020)."""

    mode: str = setting(
        "none",
        "'user': each client's whole message clipped and the cohort's sum noised at the server (user-level DP); "
        "'record': per-sample clipping and noise in every local step (record-level DP-SGD); 'none'.",
        choices=PRIVACY_MODES,
    )
    clip: str = setting(
        "1",
        "The L2 bound C on a client's update (user) or on one sample's gradient (record), or adaptive:QUANTILE "
        "(user: C follows the QUANTILE of the clients' update norms, Andrew et al.).",
    )
    noise_multiplier: float | None = setting(
        None,
        "z: Gaussian noise of standard deviation z * C on the clipped sum (null: calibrated from target_epsilon).",
        checks=(positive("z = 0 adds no noise and spends an infinite epsilon; use privacy.mode=none"),),
    )
    target_epsilon: float | None = setting(
        None,
        "Calibrate z before the run so that the epsilon spent after the last round is at most this (with delta).",
        checks=(POSITIVE,),
    )
    delta: float | None = setting(
        None, "The delta of the reported (epsilon, delta); below 1 / clients (user) or 1 / records (record)."
    )
    accountant: str = setting(
        "rdp", "dp-accounting's accountant: Renyi DP or privacy loss distributions.", choices=ACCOUNTANTS
    )
    clip_lr: float = setting(
        0.2,
        "Adaptive clipping's geometric step eta: C <- C * exp(-eta (unclipped share - quantile)), the unclipped "
        "share being the noised fraction of the cohort whose update norm is at most C.",
        checks=(POSITIVE,),
    )
    clip_start: float = setting(
        1.0,
        "Adaptive clipping's C at the first round (TensorFlow Federated's adaptive clipping, Andrew et al.'s "
        "authors', starts at 0.1).",
        checks=(POSITIVE,),
    )
    count_noise: float | None = setting(
        None,
        "Adaptive clipping: standard deviation of the noise on the count of unclipped clients (null: m / 20, "
        "Andrew et al.'s choice); it spends part of z.",
        checks=(POSITIVE,),
    )
    secure_aggregation: bool = setting(
        False,
        "The server's step sees only the cohort's sum (SecAgg+), its key agreement charged to bytes and the clock.",
    )
    min_survivors: int = setting(
        2,
        "Secure aggregation: fewest clients whose masked inputs arrive for the sum to be recovered; fewer lose the "
        "round.",
        checks=(at_least(2),),
    )
    noise_by: str = setting(
        "server",
        "Who adds user-level DP's noise: the server, to the sum it recovers (central DP: it sees the exact sum), or "
        "the clients under secure aggregation, each N(0, (z S)^2 / min_survivors) to its clipped message, so that "
        "the sum any min_survivors of them make carries the central noise and the server sees only a noised sum "
        "(distributed DP).",
        choices=NOISE_ADDERS,
    )

    def __post_init__(self):
        validate(self)
        quantile = adaptive_quantile(self.clip)
        # one spelling per value (1, 1.0 and "1.0" are one clip), so a run's name and hash do not depend on it
        object.__setattr__(self, "clip", f"adaptive:{quantile:g}" if quantile is not None else f"{float(self.clip):g}")
        unused = {key for key in ("clip_lr", "clip_start", "count_noise") if quantile is None and differs(self, key)}
        if self.mode == "none":
            unused |= {
                k for k in ("clip", "noise_multiplier", "target_epsilon", "delta", "accountant") if differs(self, k)
            }
        if not self.secure_aggregation and differs(self, "min_survivors"):
            unused.add("min_survivors")
        if self.noise_by == "clients" and (self.mode != "user" or not self.secure_aggregation):
            raise ConfigError(
                "privacy.noise_by=clients is user-level DP's noise added under secure aggregation; set "
                "privacy.mode=user and privacy.secure_aggregation=true, or leave the noise to the server"
            )
        if unused:
            key = sorted(unused)[0]
            needs = {"min_survivors": "privacy.secure_aggregation=true", "clip_lr": "privacy.clip=adaptive:QUANTILE"}
            needs["count_noise"] = needs["clip_start"] = needs["clip_lr"]
            raise ConfigError(
                f"privacy.{key} is set but does nothing without {needs.get(key, 'privacy.mode=user or record')}"
            )
        if self.mode == "none":
            return
        if self.delta is None:
            raise ConfigError(f"privacy.mode={self.mode} needs privacy.delta, e.g. privacy.delta=1e-5")
        if not 0 < self.delta < 1:
            raise ConfigError(f"privacy.delta={self.delta:g} must be in (0, 1), e.g. 1e-5")
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ConfigError(
                f"privacy.mode={self.mode} needs exactly one of privacy.noise_multiplier and privacy.target_epsilon"
            )
        if self.mode == "record" and self.adaptive is not None:
            raise ConfigError("privacy.clip=adaptive is for privacy.mode=user; give record-level DP a number")

    @property
    def private(self) -> bool:
        return self.mode != "none"

    @property
    def adaptive(self) -> float | None:
        """The target quantile of adaptive clipping, or None for a fixed clip."""
        return adaptive_quantile(self.clip)

    @property
    def initial_clip(self) -> float:
        """C at the first round: the fixed clip, or adaptive clipping's start (``clip_start``)."""
        return self.clip_start if self.adaptive is not None else float(self.clip)


def adaptive_quantile(clip: str) -> float | None:
    """``adaptive:Q`` -> Q, a number -> None; anything else a one-line ConfigError."""
    text = str(clip).strip()
    if text.startswith("adaptive:"):
        try:
            quantile = float(text.split(":", 1)[1])
        except ValueError:
            quantile = -1.0
        if not 0 < quantile < 1:
            raise ConfigError(f"privacy.clip={text} needs a quantile in (0, 1), e.g. adaptive:0.5")
        return quantile
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(
            f"privacy.clip={text} must be a positive number or adaptive:QUANTILE, e.g. 1.0 or adaptive:0.5"
        )
    if value > FLOAT32_MAX:  # a string, so validate()'s own check of numbers does not see it
        raise ConfigError(f"privacy.clip={text} is beyond float32's range (3.4e38), in which the clients compute")
    return None


@dataclass(frozen=True)
class CompressionConfig:
    """Compressed updates (docs/how-to/compression.md): what a client's update of the parameters is encoded as on
    the uplink, whether the client keeps the encoding's error for its next update, and what the server's model
    updates are encoded as on the downlink."""

    uplink: str = setting(
        "none",
        "none, qsgd:BITS (unbiased stochastic quantisation, BITS in 1..16; qsgd:BITS,BUCKET: a norm per BUCKET "
        "numbers, not per tensor), topk:FRACTION or randk:FRACTION (the fraction of each tensor's coordinates kept, "
        "in (0, 1]).",
    )
    error_feedback: bool = setting(
        False, "Each client adds what its last encoding lost to its next update (error feedback)."
    )
    downlink: str = setting(
        "none",
        "The server's model updates as broadcast, in the codecs of compression.uplink: clients train from the "
        "model those updates build, and download the ones since their last download.",
    )

    def __post_init__(self):
        for name in ("uplink", "downlink"):
            try:
                parse_codec(getattr(self, name))
            except ValueError as error:
                raise ConfigError(f"compression.{name}={error}") from None
        if self.error_feedback and self.uplink == "none":
            raise ConfigError("compression.error_feedback=true needs a compression.uplink other than none")

    @property
    def on(self) -> bool:
        """Whether either direction is compressed."""
        return self.uplink != "none" or self.downlink != "none"


SECTIONS = {
    "federation": FederationConfig,
    "train": TrainConfig,
    "model": ModelConfig,
    "data": DataConfig,
    "systems": SystemsConfig,
    "resources": ResourceConfig,
    "tracking": TrackingConfig,
    "checkpoint": CheckpointConfig,
    "privacy": PrivacyConfig,
    "compression": CompressionConfig,
}
