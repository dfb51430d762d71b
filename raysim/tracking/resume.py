"""``raysim run --resume RUN_ID_OR_DIR``: find the checkpoint and rebuild the run's configuration from it.

A resumed run is the saved run continued: its config comes from the checkpoint, and only what cannot change
the numbers may differ (where it runs: ``resources.*`` but the threads a client sums with; how often it
checkpoints) besides ``--rounds``, which may extend a run. The same MLflow run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from raysim.base.errors import ConfigError
from raysim.config import CheckpointConfig, Config, TrackingConfig, as_recorded, build_config
from raysim.tracking import checkpoint as ckpt

CHANGEABLE = {("federation", "rounds"), ("checkpoint", "every"), ("checkpoint", "keep")}
CHANGEABLE_SECTIONS = {"resources"}


def find(target: str, tracking_uri: str | None = None, checkpoint_dir: str | None = None) -> ckpt.Checkpoint:
    """The newest checkpoint of ``target``: a checkpoint folder (a run's or one ``round-*``), or a run id looked
    up under the checkpoint root of ``tracking_uri`` (the default store when None). Its manifest, its files checked:
    the simulation reads the tensors where it runs (:func:`~raysim.tracking.checkpoint.with_tensors`)."""
    if Path(target).exists():
        return ckpt.load(target, tensors=False)
    root = CheckpointConfig(dir=checkpoint_dir).root(TrackingConfig(tracking_uri=tracking_uri).resolved_uri)
    if (root / target).is_dir():
        return ckpt.load(root / target, tensors=False)
    raise ConfigError(
        f"--resume {target!r} is neither a checkpoint folder nor a run with checkpoints in {root}; "
        f"pass the folder printed when the run stopped, or the run id with its --tracking-uri"
    )


def resumed_config(found: ckpt.Checkpoint, method: str | None, layers: list[Mapping[str, Any]]) -> Config:
    """The checkpoint's config with the allowed changes in ``layers``, its tracking store pinned (so a resume
    from another working directory logs to the run's own store)."""
    if method is not None and method != found.method:
        raise ConfigError(
            f"checkpoint of run {found.run_id} is a {found.method} run, not {method}; "
            f"use 'raysim run {found.method} --resume ...'"
        )
    for layer in layers:
        for section, values in layer.items():
            for key in values:
                if section not in CHANGEABLE_SECTIONS and (section, key) not in CHANGEABLE:
                    raise ConfigError(
                        f"{section}.{key} cannot change when resuming (the run continues its saved "
                        f"config); only --rounds, the resource flags and checkpoint.every/keep can"
                    )
    # checkpoints older than train.precision ran in float32; "auto" must not pick bf16 for their remaining rounds
    saved_precision = found.config.get("train", {}).get("precision", "fp32")
    pinned = {"tracking": {"tracking_uri": found.tracking_uri}, "train": {"precision": saved_precision}}
    recorded = as_recorded(found.config)  # a local Ray's dashboard is asked for by each command, not kept by the run
    per_command = {"dashboard", "dashboard_host"}
    recorded["resources"] = {k: v for k, v in recorded.get("resources", {}).items() if k not in per_command}
    config = build_config(found.method, [recorded, *layers, pinned])
    saved_threads = found.config.get("resources", {}).get("threads", 0)
    if saved_threads and config.resources.threads != saved_threads:
        raise ConfigError(
            f"resources.threads cannot change when resuming: the run's clients sum with {saved_threads} torch "
            "threads, and another count changes the float sums; drop resources.threads"
        )
    saved_rounds = found.config.get("federation", {}).get("rounds", config.federation.rounds)
    if config.privacy.target_epsilon is not None and config.federation.rounds != saved_rounds:
        raise ConfigError(
            f"run {found.run_id} calibrated its noise to privacy.target_epsilon over {saved_rounds} rounds; more "
            "rounds would change the noise of the rounds to come and spend more than the target; start a new run"
        )
    if config.federation.rounds <= found.round:
        raise ConfigError(
            f"run {found.run_id} has already run {found.round} of its {config.federation.rounds} "
            f"rounds; pass --rounds N with N > {found.round} to extend it"
        )
    return config
