"""What identifies a run and traces it to what produced it, as MLflow shows them: the run's name, its one-line
description, its provenance tags (command line, git commit, user, versions, hardware) and its data set as an MLflow
dataset input.

A run's name spells out the method, a short hash of the resolved config but its seed (where and how a run goes,
``NOT_COMPUTED``, left out), the seed, the data set, the partition with its parameters and the clients: two configs
that compute differently never share a name, the same config always gets the same one, and the first ~20 characters
(what MLflow's runs table shows) already tell any two runs apart.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from mlflow.entities import Dataset, DatasetInput, InputTag
from mlflow.utils.mlflow_tags import (
    MLFLOW_DATASET_CONTEXT,
    MLFLOW_GIT_BRANCH,
    MLFLOW_GIT_COMMIT,
    MLFLOW_GIT_DIRTY,
    MLFLOW_RUN_NOTE,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
    MLFLOW_USER,
)

from raysim import __version__
from raysim.base.errors import ConfigError
from raysim.base.shipped_weights import shipped_weights
from raysim.config import NOT_COMPUTED, Config, build_config
from raysim.core.registry import get_method
from raysim.data import IMBALANCE_ORDERED
from raysim.data.partition import PARTITIONERS
from raysim.data.shards import ShardStore

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # raysim/: its git checkout is the code that ran
HASH_CHARS, DIGEST_CHARS = 6, 8


def show(value: Any) -> str:
    """A config value as ``--set`` takes it: ``0.5``, ``10``, ``[0, 1]``, ``true``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def partition_label(config: Config) -> str:
    """The partition and the parameters it reads: ``dirichlet0.5``, ``pathological2``, ``pachinko0.5,10``, ``iid``."""
    data = config.data
    return data.partition + ",".join(show(getattr(data, key)) for key in PARTITIONERS[data.partition].reads)


def _named_keys(config: Config) -> set[str]:
    """The flat keys a run's name spells out."""
    reads = PARTITIONERS[config.data.partition].reads
    return {"method", "data.dataset", "data.partition", "federation.clients", "federation.seed"} | {
        f"data.{key}" for key in reads
    }


# Keys added after hashes were published (the clock's, asynchronous mode's, privacy's, compression's): left out while
# at their defaults, so a setting's hash, its runs' names and a comparison's finished cells stay what they were.
LATER_KEYS = (
    "federation.deadline_s",
    "federation.stragglers",
    "federation.over_select",
    "federation.sampling",
    "federation.mode",
    "federation.concurrency",
    "federation.buffer",
    "federation.staleness",
    "federation.server_lr",
    "federation.async_alpha",
    "systems.",
    "privacy.",
    "compression.",
    "sgpt.group_mode",
)
# Added later (2026-11-29), each changing what one partition computes where it holds its new value: pathological
# class sets drawn at random, where they were a ring; an imbalanced domains partition's counts in the data set's
# paper order, where they were by domain id; its domains' sizes shrinking as FedGCR's authors' do, where every row
# was dealt; evaluation on validation rows of the training split, where it was on the test split. Hashed only
# there, so every hash published before stays what it was, the old values included (a table rerun "as it ran" joins
# its experiment), and a new setting never joins an old one.
NEW_DATA = {
    "data.class_sets": lambda data: data.partition == "pathological" and data.class_sets != "ring",
    "data.domain_order": lambda data: (
        data.partition == "domains"
        and data.dif != 1
        and data.domain_order != "id"
        and data.dataset in IMBALANCE_ORDERED
    ),
    "data.domain_sizes": lambda data: data.partition == "domains" and data.dif != 1 and data.domain_sizes != "full",
    "data.holdout": lambda data: data.holdout != "test",
    "data.pachinko": lambda data: data.partition == "pachinko" and data.pachinko != "proportional",
}
# Options added later whose default changed what a method computes: hashed only away from the value every run had
# before (pFedHN evaluated each client with the tensors it trained until 2026-12-07), so a new setting never joins an
# old one and a rerun "as it ran" (with the old value) joins its experiment
OLD_VALUES = {"pfedhn.evaluate": "trained"}
# Methods whose numbers changed on a date, for the same config: a revision joins their hash, so a resumed comparison
# never mixes cells from before and after
REVISIONS = {"harmofl": "amplitude swapped in pixel space (2026-11-29)"}


def rounded_half_up(fed) -> bool:
    """Whether the clients a round or the held-out clients land on a half, where raysim rounds up since 2026-11-29
    and Python's ``round`` (before) to the even neighbour."""
    unseen = max(1, round(fed.unseen_fraction * fed.clients)) if fed.unseen_fraction > 0 else 0
    per_round = max(1, round(fed.participation * (fed.clients - unseen)))
    return (unseen, per_round) != (fed.unseen_clients, fed.clients_per_round)


def config_hash(config: Config) -> str:
    """A short hash of everything the run computes with but its seed (the seeds of one setting share it)."""
    defaults = Config(config.method, options=type(config.options)()).flat()  # the method's option defaults too
    setting = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in config.flat().items()
        if key != "federation.seed"
        and key.split(".", 1)[0] not in NOT_COMPUTED
        and not (key.startswith(LATER_KEYS) and value == defaults.get(key))
        and not (key in NEW_DATA and not NEW_DATA[key](config.data))
        and not (key in OLD_VALUES and value == OLD_VALUES[key])
    }
    if config.method in REVISIONS:
        setting["revision"] = REVISIONS[config.method]
    if config.federation.asynchronous and config.federation.buffer_size == 1:
        setting["fedasync staleness"] = "t - tau"  # s(tau + 1) since 2026-12-07: not the cells of s(tau)
    if rounded_half_up(config.federation):
        setting["rounding"] = "half up"  # the clients a round, or held out, differ from Python's round's
    if config.data.partition == "domains" and config.federation.unseen_fraction > 0:
        setting["held out"] = "each domain keeps a training client"  # another draw since 2026-11-29
    text = json.dumps(setting, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def run_name(config: Config) -> str:
    """``METHOD-HASH-s<SEED>-DATASET-PARTITION-<M>c``, e.g. ``sgpt-3f9a1c-s0-glyphs62-dirichlet0.5-100c``: what tells
    two runs apart (method, setting, seed) comes first, where MLflow's runs table does not cut it off."""
    fed = config.federation
    parts = [config.method, config_hash(config), f"s{fed.seed}", config.data.dataset, partition_label(config)]
    return "-".join([*parts, f"{fed.clients}c"])


def describe(config: Config, given: Config, sampled: Collection[str] = ()) -> str:
    """One line saying what ran (``config``, resolved), then the settings ``given`` changed from the defaults that
    the line does not already say, less the ``sampled`` keys (a sweep's trials each draw their own)."""
    fed, data = config.federation, config.data
    info = get_method(config.method)
    reads = ", ".join(f"{key}={show(getattr(data, key))}" for key in PARTITIONERS[data.partition].reads)
    line = (
        f"{config.method} ({info.family}) on {data.dataset}, {data.partition}{f' {reads}' if reads else ''}, "
        f"{fed.clients} clients ({fed.clients_per_round} per round) x {fed.rounds} rounds, "
        f"{config.model.backbone}, {config.train.precision}, seed {fed.seed}"
    )
    said = _named_keys(config) | {"federation.participation", "federation.rounds", "model.backbone", "train.precision"}
    said |= set(sampled)
    defaults = build_config(config.method, []).flat()
    changed = [
        f"{key}={show(value)}"
        for key, value in given.flat().items()
        if value != defaults.get(key) and key not in said and key.split(".", 1)[0] not in NOT_COMPUTED
    ]
    return line + (f"; also {', '.join(changed)}" if changed else "")


def command_line() -> str:
    """This process's command line, its program by name: ``raysim run fedvpt --preset quick``."""
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"


def git_tags(folder: Path = PACKAGE_DIR) -> dict[str, str]:
    """MLflow's git tags (commit, branch, whether the checkout has uncommitted changes) of the checkout whose files
    ``folder`` is among; none when raysim is not run from a checkout (installed, say, in a virtual environment inside
    another project's checkout, which does not track it)."""
    try:
        import git

        repo = git.Repo(folder, search_parent_directories=True)
        if not repo.git.ls_files("--", str(folder)):
            return {}
        tags = {MLFLOW_GIT_COMMIT: repo.head.commit.hexsha, MLFLOW_GIT_DIRTY: str(repo.is_dirty()).lower()}
        if not repo.head.is_detached:
            tags[MLFLOW_GIT_BRANCH] = repo.active_branch.name
        return tags
    except Exception:  # no git, no checkout, or a repository without commits: nothing to trace
        return {}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def cpu_model() -> str:
    """This machine's CPU model and CPU count, e.g. ``AMD EPYC (2 CPUs)``."""
    model = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model} ({os.cpu_count()} CPUs)"


NO_DRIVER_GPU = "on the workers (none on the driver)"


def gpu_model() -> str:
    """The first GPU this process may use (``CUDA_VISIBLE_DEVICES``'s first, by index or UUID) as ``nvidia-smi``
    names it, or where the GPUs are when the driver has none (a cluster's workers). Read from ``nvidia-smi`` rather
    than torch, so that the driver does not initialise CUDA for a tag."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return NO_DRIVER_GPU
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except FileNotFoundError:
        return NO_DRIVER_GPU
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown (nvidia-smi failed: {type(error).__name__})"
    rows = [[field.strip() for field in line.split(",", 2)] for line in listed.splitlines() if line.count(",") >= 2]
    if not rows:
        return NO_DRIVER_GPU
    wanted = visible.split(",")[0].strip() if visible else rows[0][0]
    return next((name for index, uuid, name in rows if wanted == index or uuid.startswith(wanted)), rows[0][2])


def provenance_tags(uses_gpus: bool) -> dict[str, str]:
    """Who ran what code where: MLflow's source, user and git tags, the versions and the hardware."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (some containers)
        user = "unknown"
    tags = {
        MLFLOW_SOURCE_NAME: command_line(),
        MLFLOW_SOURCE_TYPE: "LOCAL",
        MLFLOW_USER: user,
        **git_tags(),
        "version.raysim": __version__,
        "version.torch": _version("torch"),
        "version.ray": _version("ray"),
        "version.mlflow": _version("mlflow"),
        "version.python": platform.python_version(),
        "hardware.cpu": cpu_model(),
    }
    if uses_gpus:
        tags["hardware.gpu"] = gpu_model()
    return tags


def evaluation(config: Config) -> str:
    """Which clients the accuracy metrics cover (``federation.eval_clients``)."""
    fed = config.federation
    if fed.evaluates_a_sample:
        sample = f"a fixed sample of {fed.eval_clients} of {fed.clients} clients"
        return f"{sample} (global and local accuracy on their test rows)"
    return "all clients"


def run_tags(config: Config, given: Config) -> dict[str, str]:
    """Every tag of a new run of ``config`` (resolved; ``given``: as the user set it)."""
    return {
        "method": config.method,
        "family": get_method(config.method).family,
        "dataset": config.data.dataset,
        "partition": config.data.partition,
        "seed": str(config.federation.seed),
        "backend": config.resources.backend,
        "precision": config.train.precision,
        "evaluation": evaluation(config),
        MLFLOW_RUN_NOTE: describe(config, given),
        **provenance_tags(config.resources.gpus_per_client > 0),
        **({WEIGHTS_TAG: digest} if (digest := weights_digest(config)) else {}),
    }


WEIGHTS_TAG = "raysim.weights_sha256"  # the backbone weights a run started from, which its resume must find again


def weights_digest(config: Config) -> str | None:
    """The SHA-256 of the backbone weights ``config`` loads: its ``model.weights`` file, else the weights raysim
    ships for ``model.backbone`` (their sidecar's, checked against the file where a model is built); None for a
    random initialisation, or weights from the hub (cached by timm under their own revision)."""
    model = config.model
    if model.weights is not None:
        digest = hashlib.sha256()
        with open(model.weights, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    shipped = shipped_weights(model.backbone) if model.pretrained else None
    return shipped["sha256"] if shipped else None


def refuse_other_weights(client, run_id: str, config: Config) -> None:
    """A one-line error where the backbone weights a resumed run would load are not those it started from
    (:data:`WEIGHTS_TAG`): a weights file replaced under the same name, say. A run that recorded none is not
    checked."""
    recorded = client.get_run(run_id).data.tags.get(WEIGHTS_TAG)
    digest = weights_digest(config)
    if recorded is None or recorded == digest:
        return
    where = config.model.weights or f"raysim's shipped {config.model.backbone}"
    raise ConfigError(
        f"run {run_id} cannot resume: its backbone weights ({where}) are not those it started from (SHA-256 "
        f"{(digest or 'none')[:12]}, the run's {recorded[:12]}); put the run's weights back as they were"
    )


def partition_digest(shards: ShardStore) -> str:
    """A short digest of the clients' data: every row (images, labels, domains) and who holds it
    (:meth:`ShardStore.content_digest <raysim.data.shards.ShardStore.content_digest>`)."""
    return shards.content_digest()[:DIGEST_CHARS]


def refuse_other_data(client, run_id: str, config: Config, shards: ShardStore) -> None:
    """A one-line error where the data a resumed run rebuilt are not the data it started on (its dataset input's
    digest, :func:`partition_digest`): a file read from disk changed or moved since, say. A run that recorded no
    dataset input is not checked."""
    recorded = [entry.dataset.digest for entry in client.get_run(run_id).inputs.dataset_inputs]
    digest = partition_digest(shards)
    if not recorded or recorded[0] == digest:
        return
    where = f" read from {config.data.data_dir}" if config.data.data_dir else ""
    raise ConfigError(
        f"run {run_id} cannot resume: its data{where} are not the data it started on (digest {digest}, the run's "
        f"{recorded[0]}); put the run's data back as they were"
    )


def dataset_input(config: Config, shards: ShardStore) -> DatasetInput:
    """The run's data as an MLflow dataset input: the data set's name, the digest of its partition, where it comes
    from, and its size (the runs table's Dataset column shows ``name (digest)`` and the context)."""
    data = config.data
    source = {"dataset": data.dataset, **({"uri": str(Path(data.data_dir).resolve())} if data.data_dir else {})}
    train_rows = int(shards.train_offsets[-1] - shards.train_offsets[0])
    profile = {
        "rows": len(shards.labels),
        "train_rows": train_rows,
        "test_rows": len(shards.labels) - train_rows,
        "clients": shards.num_clients,
        "unseen_clients": len(shards.unseen),
        "classes": shards.info.num_classes,
        "domains": shards.info.num_domains,
        "image_shape": list(shards.info.image_shape),
    }
    entity = Dataset(
        name=data.dataset,
        digest=partition_digest(shards),
        source_type="local" if data.data_dir else "raysim",
        source=json.dumps(source),
        profile=json.dumps(profile),
    )
    context = f"{partition_label(config)}, {config.federation.clients} clients"
    return DatasetInput(dataset=entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])
