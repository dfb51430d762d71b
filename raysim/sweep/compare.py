"""``raysim compare M1 M2 ... --seeds S``: every method on the same data, seed by seed, at equal tuning budgets.

A method may be named with settings of its own, ``METHOD:KEY=VALUE[:KEY=VALUE...]`` (a bare KEY is one of the
method's options, else ``section.key``): ``sgpt:head_pooling=cls`` is one row of an ablation. Its settings come
after its tuned values, so tuning never undoes them.

Seed s is the run seed ``base + s`` (``base``: ``--seed``, default 0): it draws the partition, the initialisation and
the sampling together, and every method of seed s sees the same partition. With ``--tune-budget B`` each method
first gets B trials of ``raysim tune`` over its own space (``tune_spaces/METHOD.yaml``), FIFO so that every trial
runs all rounds, on the first seed only, at the comparison's own setting (the one its cells run: the space's
``fixed`` values are dropped), scored on validation rows (``data.holdout=validation``: a fifth of the training
rows, the test rows unseen); its best sampled values then run on every seed. Without it every method runs at the
preset.

Every (method, seed) cell is a whole ``raysim run``, an MLflow run in the comparison's experiment nested under the
comparison's own run, which ends with the report (:mod:`raysim.tracking.comparison`) as artifacts and its figures
as metrics. The cells run as Ray Tune trials, as many at once as the cluster hosts. Running the same command again
resumes: finished cells (same method, seed and config hash) and finished tunings (same budget and setting:
:func:`tuning_plan`; another is refused) are kept, a stopped tuning resumes
from its trials' checkpoints, and the cells left run again from their start. One process at a time runs a
comparison (a lock in its folder).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NOTE, MLFLOW_SOURCE_NAME
from ray import tune
from rich.console import Console

from raysim.base.errors import ConfigError, RunInterrupted, SweepError
from raysim.base.paths import sqlite_file
from raysim.config import Config, beside_store, build_config, load_preset, parse_override, preset_for_method, yaml12
from raysim.config.partition_keys import refuse_unread_partition_keys
from raysim.core.registry import get_method
from raysim.engine.driver import run
from raysim.engine.ray_connect import connect_ray
from raysim.engine.setup import prepare_shards, refuse_unrunnable
from raysim.sweep import tune as sweeping
from raysim.sweep.space import as_layer, default_space_file
from raysim.sweep.trial_progress import CellProgress, RoundsToTune
from raysim.sweep.tune_console import fit, quiet_trial_exit, stop_signum, stopped_at
from raysim.tracking import provenance
from raysim.tracking.comparison import (
    CELL,
    METHODS_TAG,
    NAME,
    SEEDS_TAG,
    TUNED,
    TUNING,
    TUNING_SEED,
    VARIANT,
    Arranged,
    cell_label,
    comparison_metrics,
    named_order,
    write_arranged,
)
from raysim.tracking.mlflow import COMPARE, KIND, Tracker, check_store, end_running, every_run, literal, store_client

HASH = "raysim.config_hash"
TUNED_FILE = "tuned.json"
TUNING_FILE = "tuning.json"  # method -> its sweep's folder while it is tuned: a stopped tuning resumes
SCORED_FILE = "scored.json"  # method -> the rows its trials were scored on (data.holdout; absent: the test rows)
PLANS_FILE = "plans.json"  # method -> the budget and setting it was tuned with (tuning_plan)
SCORED_ON = {
    "validation": "validation rows (a fifth of the training rows; the test rows unseen)",
    "test": "the test rows",  # a method tuned in a comparison that wrote no scored.json
}


def arm(label: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """``METHOD:KEY=VALUE:...`` -> (METHOD, its settings as a config layer); a bare KEY is one of METHOD's options. A
    part without ``=`` after a setting continues its value (``systems.speed=lognormal:3,0.5``)."""
    method, *parts = label.split(":")
    options = get_method(method).options_key
    pairs: list[str] = []
    for part in parts:
        if "=" not in part and pairs:
            pairs[-1] += f":{part}"
        else:
            pairs.append(part)
    layer: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{label!r}: {pair!r} must be KEY=VALUE, e.g. sgpt:head_pooling=cls")
        section, key, value = parse_override(pair if "." in pair.split("=", 1)[0] else f"{options}.{pair}")
        if key in layer.get(section, {}):
            raise ConfigError(f"{label!r} sets {section}.{key} twice; give each key once")
        layer.setdefault(section, {})[key] = value
    return method, layer


@dataclass(frozen=True)
class Comparison:
    """What a comparison runs: its name (= MLflow experiment), methods, seeds, preset, flags and tuning budget."""

    name: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    preset: str | None
    flags: list[dict]  # flags and --set as given
    pinned: dict  # the store, experiment, paths and precision every cell shares
    tune_budget: int
    folder: str
    max_concurrent: int = 1

    def layers(self, label: str) -> list[dict]:
        """The preset (for the method of ``label``) and the flags."""
        method = arm(label)[0]
        return ([preset_for_method(load_preset(self.preset), method)] if self.preset else []) + self.flags

    def config(self, label: str, seed: int, tuned: dict[str, Any]) -> Config:
        """The cell's config: preset < flags < its tuned values < its own settings < the seed < the pinned layer, but
        for a precision the arm names itself (``fedvpt:train.precision=bf16``: a precision ablation)."""
        method, own = arm(label)
        seeded = {"federation": {"seed": seed}}
        pinned = self.pinned
        if "precision" in own.get("train", {}):
            pinned = {**pinned, "train": {**pinned.get("train", {}), "precision": own["train"]["precision"]}}
        return build_config(method, [*self.layers(label), as_layer(tuned), own, seeded, pinned])

    @property
    def uri(self) -> str:
        """The tracking store every cell logs to."""
        return self.pinned["tracking"]["tracking_uri"]

    def tuning(self, scored: dict[str, str]) -> str:
        """How the methods' hyperparameters were chosen, as the report says it; ``scored``: the rows each method's
        trials were scored on (:func:`tuned_values`)."""
        if not self.tune_budget:
            return "presets (no tuning)"
        rows = {SCORED_ON[holdout] for holdout in scored.values()}
        on = rows.pop() if len(rows) == 1 else ", ".join(f"{m} {SCORED_ON[h]}" for m, h in sorted(scored.items()))
        return (
            f"{self.tune_budget} raysim tune trials per method (its tune_spaces/ space, FIFO, this setting) on seed "
            f"{self.seeds[0]}, ranked by global_acc's last-10 mean on {on}; the best values run on every seed"
        )


def plan(
    methods: tuple[str, ...],
    seeds: int,
    tune_budget: int,
    max_concurrent: int | None,
    preset: str | None,
    flags: list[dict],
) -> Comparison:
    """Validate everything (methods, counts, spaces, store, cluster) before any run starts."""
    if len(methods) < 2:
        raise ConfigError("raysim compare needs at least two methods (the first is the one the others are paired with)")
    if len(set(methods)) != len(methods):
        raise ConfigError(f"each method once: {' '.join(methods)} names one twice")
    named = [arm(label) for label in methods]
    for label, (_, own) in zip(methods, named):
        changed = [f"data.{k}" for k in own.get("data", {})] + [
            f"federation.{k}" for k in own.get("federation", {}) if f"federation.{k}" in sweeping.DATA_KEYS
        ]
        if changed:
            raise ConfigError(
                f"{label}: {changed[0]} changes the clients' data, which every method of a seed shares; "
                f"set it for all (--set {changed[0]}=...) or compare it in separate comparisons"
            )
        if own.get("resources"):
            key = f"resources.{next(iter(own['resources']))}"
            raise ConfigError(
                f"{label}: {key} changes what a cell reserves, and every cell runs in a placement group of one "
                f"shape; set it for all (--set {key}=...) or compare it in separate comparisons"
            )
    if seeds < 1:
        raise ConfigError(f"--seeds {seeds} must be at least 1 (3 or more for a confidence interval that means much)")
    if tune_budget < 0:
        raise ConfigError(f"--tune-budget {tune_budget} must be 0 (run the presets) or more trials")
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent {max_concurrent} must be at least 1")
    if tune_budget:
        for method, _ in named:
            default_space_file(method)  # a one-line error naming the methods that have a space
    layers = [[preset_for_method(load_preset(preset), m)] if preset else [] for m, _ in named]
    probes = [build_config(m, [*before, *flags, own]) for (m, own), before in zip(named, layers)]
    refuse_unread_partition_keys(flags, probes[0].data.partition)  # every arm's data are the same
    for probe in probes:
        sweeping.refuse_server_resources(probe)
        refuse_unrunnable(probe)
    base = probes[0].federation.seed
    name = probes[0].tracking.experiment if sweeping.flag_set(flags, "experiment") else default_name(methods, preset)
    uri = probes[0].tracking.resolved_uri
    check_store(uri, name)
    connect_ray(probes[0].resources)
    comparison = Comparison(
        name,
        tuple(methods),
        tuple(range(base, base + seeds)),
        preset,
        flags,
        sweeping.pinned_layer(probes[0], name),
        tune_budget,
        str(beside_store(uri) / "compare" / folder_name(name)),
    )
    first = comparison.config(methods[0], comparison.seeds[0], {})
    comparison = dataclasses.replace(comparison, max_concurrent=sweeping.plan_concurrency(first, max_concurrent))
    for label in methods if tune_budget else ():  # every tuning's space, before the first one runs for hours
        _arm_plan(comparison, label)
    refuse_other_order(comparison)
    return comparison


def default_name(methods: tuple[str, ...], preset: str | None) -> str:
    """``compare-M1-M2[-PRESET]``: the same command names the same comparison, so running it again resumes it. PRESET
    is the preset's name, dots and all (``offline-dir0.3``), or a YAML file's name less ``.yaml``/``.yml``."""
    preset_name = Path(preset).name.removesuffix(".yaml").removesuffix(".yml") if preset else None
    return "-".join(["compare", *methods, *([preset_name] if preset_name else [])])


FOLDER_CHARS = 100  # a comparison's folder name at most (file systems refuse names over 255 bytes)


def folder_name(name: str) -> str:
    """The folder of comparison ``name``: the name, path separators replaced, or where it is longer than
    ``FOLDER_CHARS`` (many arms with settings of their own) its start and a hash of the whole, so it stays unique."""
    safe = name.replace("/", "_").replace("\\", "_")
    if len(safe) <= FOLDER_CHARS:
        return safe
    return f"{safe[: FOLDER_CHARS - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def tuned_values(comparison: Comparison) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each method's best sampled values after its ``tune_budget`` trials (empty without a budget), and the rows its
    trials were scored on (``data.holdout``); a tuning that finished before (``tuned.json`` in the comparison's
    folder, ``scored.json`` beside it) is not run again, and one that was stopped (``tuning.json``: its sweep's
    folder) resumes from its trials' checkpoints."""
    if not comparison.tune_budget:
        return {method: {} for method in comparison.methods}, {}
    own = Path(comparison.folder)
    path, stopped_path, scored_path = own / TUNED_FILE, own / TUNING_FILE, own / SCORED_FILE
    done, stopped, scored = _read_json(path), _read_json(stopped_path), _read_json(scored_path)
    plans_path = own / PLANS_FILE
    plans = _read_json(plans_path)
    for label in comparison.methods:
        plan = tuning_plan(comparison, label)
        resumable = label in stopped and tune.Tuner.can_restore(stopped[label])  # else it is tuned anew
        if (label in done or resumable) and plans.get(label, plan) != plan:  # no record: taken as it was
            tuned, record = ("tuned", path) if label in done else ("was tuning", stopped_path)
            raise ConfigError(
                f"comparison {comparison.name} {tuned} {label} with {plans[label]['budget']} trials at the setting "
                f"it had then; rerun it as it was, give another --experiment, or remove {record} to tune anew"
            )
        if label in done:
            continue
        if resumable:
            sweep, folder = sweeping.load_sweep(stopped[label])
            print(f"resuming the tuning of {label} in {folder}", file=sys.stderr, flush=True)
            resume = str(folder)
        else:
            if label in stopped:  # killed before Tune saved its state: its runs end, and the method is tuned anew
                sweeping.abandon(stopped[label])
                print(f"the tuning of {label} in {stopped[label]} cannot be resumed: tuning it anew", file=sys.stderr)
            sweep, resume = _arm_sweep(comparison, label), None
            folder = sweeping.save_sweep(sweep)
            print(f"tuning {label}: {sweep.plan_line()}", file=sys.stderr, flush=True)
            stopped[label], plans[label] = str(folder), plan  # a stopped tuning resumes only under its own plan
            _write_json(stopped_path, stopped)
            _write_json(plans_path, plans)
        try:
            best = sweeping.execute(sweep, folder, resume)
        except RunInterrupted:  # not the sweep's own resume command: the comparison's resumes it
            raise RunInterrupted(
                f"stopped comparison {comparison.name} while tuning {label}; run the same command to resume (the "
                f"methods tuned so far keep their values; {label}'s tuning resumes from its trials' checkpoints)"
            ) from None
        done[label], scored[label], plans[label] = best["params"], sweep.trial_config({}).data.holdout, plan
        _write_json(path, done)
        _write_json(scored_path, scored)
        _write_json(plans_path, plans)
        del stopped[label]
        _write_json(stopped_path, stopped)
    return done, _scored_on(comparison.methods, done, scored)


def tuning_plan(comparison: Comparison, label: str) -> dict[str, Any]:
    """What ``label``'s tuning depends on: the budget and a hash of the setting its trials run (preset, flags, the
    tuning seed), recorded beside its values so that a rerun with another budget or setting is not given them."""
    layers = [
        {k: v for k, v in layer.items() if k not in ("resources", "tracking")} for layer in comparison.layers(label)
    ]
    setting = {"layers": layers, "label": label, "seed": comparison.seeds[0]}  # the numbers', not where they run
    digest = hashlib.sha256(json.dumps(setting, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"budget": comparison.tune_budget, "setting": digest}


def scoring(comparison: Comparison) -> dict[str, str]:
    """The rows each method's trials were (or, not tuned yet, will be) scored on, from the comparison's folder."""
    if not comparison.tune_budget:
        return {}
    folder = Path(comparison.folder)
    return _scored_on(comparison.methods, _read_json(folder / TUNED_FILE), _read_json(folder / SCORED_FILE))


def _scored_on(methods: tuple[str, ...], done: dict, scored: dict) -> dict[str, str]:
    """``scored.json``'s record, else the test rows for a method tuned in a comparison that kept no record, else the
    validation rows (:func:`_arm_sweep`)."""
    return {label: scored.get(label, "test" if label in done else "validation") for label in methods}


def _arm_sweep(comparison: Comparison, label: str) -> sweeping.Sweep:
    """A new sweep of ``label``'s space (:func:`_arm_plan`), its run opened."""
    return sweeping.open_parent(_arm_plan(comparison, label))


def _arm_plan(comparison: Comparison, label: str) -> sweeping.Sweep:
    """The sweep of ``label``'s space, checked as ``raysim tune`` checks one: FIFO, on the first seed and the
    validation rows, at the comparison's setting (:func:`arm_space` drops the space's fixed values), logged to the
    experiment ``<comparison>-tuning``."""
    method, own = arm(label)
    layers = [*comparison.layers(label), own, {"tracking": {"experiment": f"{comparison.name}-tuning"}}]
    layers.append({"federation": {"seed": comparison.seeds[0]}, "data": {"holdout": "validation"}})
    name = f"{folder_name(comparison.name)}-{method}-{time.strftime('%Y%m%d-%H%M%S')}"
    space = arm_space(comparison, label)
    return sweeping.plan(
        method,
        space,
        comparison.tune_budget,
        comparison.max_concurrent,
        "global_acc",
        "max",
        "fifo",
        name,
        None,
        layers,
    )


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _write_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))


def arm_space(comparison: Comparison, label: str) -> str:
    """The search space an arm tunes: its method's, less the keys the arm sets itself, each ``grid`` drawn as a
    ``choice`` (a grid runs all its values per sample, which would give the arm more trials than the budget), and
    without its ``fixed:`` values (a space's own setting, e.g. fewer rounds or another data set: the arm tunes at
    the comparison's setting, the one its cells run); written beside the comparison where it differs from the
    method's file."""
    method, own = arm(label)
    source = default_space_file(method)
    data = yaml12.load(Path(source).read_text())
    kept = {
        key: _drawn(spec)
        for key, spec in data["space"].items()
        if key.split(".", 1)[1] not in own.get(key.split(".")[0], {})
    }
    if kept == data["space"] and not data.get("fixed"):
        return source
    if not kept:
        raise ConfigError(f"{label} sets every key of {Path(source).name} itself: nothing is left to tune")
    path = Path(comparison.folder) / "spaces" / f"{label}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"space": kept}, sort_keys=False))
    return str(path)


def _drawn(spec: Any) -> Any:
    """A space's sampler with ``{grid: VALUES}`` made ``{choice: VALUES}``: one trial, one value."""
    return {"choice": spec["grid"]} if isinstance(spec, dict) and list(spec) == ["grid"] else spec


def _cell(
    params: dict[str, Any], comparison: Comparison, tuned: dict, scored: dict, shards: dict, parent: str, command: str
):
    """One (method, seed): a whole raysim run, nested under the comparison's run and named as its cell
    (``sgpt:bcd=joint/s1``), so MLflow's runs table and charts tell the arms apart."""
    label, seed = params["cell"]
    quiet_trial_exit()
    config = comparison.config(label, seed, tuned[label])
    config = dataclasses.replace(
        config, tracking=dataclasses.replace(config.tracking, run_name=cell_label(label, seed))
    )
    tags = {
        NAME: comparison.name,
        CELL: cell_label(label, seed),
        VARIANT: label,
        HASH: provenance.config_hash(config),
        TUNING: comparison.tuning({label: scored[label]} if scored else {}),
        TUNED: json.dumps(tuned[label], sort_keys=True),
        **({TUNING_SEED: str(comparison.seeds[0])} if comparison.tune_budget else {}),
        MLFLOW_PARENT_RUN_ID: parent,
        MLFLOW_SOURCE_NAME: command,
    }
    quiet = Console(file=io.StringIO())  # the comparison shows the cells' progress (CellProgress)
    result = run(config, show_progress=False, console=quiet, callbacks=[RoundsToTune()], shards=shards[seed], tags=tags)
    tune.report({"global_acc": result.summary["global_acc"]["final"], "run_id": result.run_id})


def finished_cells(comparison: Comparison, tuned: dict) -> set[tuple[str, int]]:
    """The (method, seed) cells that already have a FINISHED run of the same config; a finished cell of another
    config (the experiment holds a comparison of other settings) is a one-line error."""
    return {(label, seed) for label, seed, _ in _checked_cells(comparison, lambda label, _: tuned.get(label))}


def refuse_other_settings(comparison: Comparison) -> None:
    """Before any tuning: a one-line error where the experiment holds a finished cell that this comparison, tuned to
    that cell's own values, would not run as it ran (a comparison of other settings), or that was tuned where this
    comparison does not tune, or the other way round; cells that do not record their tuned values are checked after
    the tuning."""

    def recorded(label: str, found) -> dict | None:
        if TUNED not in found.data.tags:
            return None
        values = json.loads(found.data.tags[TUNED])
        if bool(values) != bool(comparison.tune_budget):  # tuned where this comparison does not tune, or untuned
            raise _other_settings(comparison, label, int(found.data.tags["seed"]))
        return values

    _checked_cells(comparison, recorded)


def refuse_other_order(comparison: Comparison) -> None:
    """A one-line error where the comparison's experiment holds a comparison paired with another first method: its
    figures and ``raysim report`` pair every arm with the first the experiment's comparison named."""
    store = sqlite_file(comparison.uri)
    named = named_order(comparison.uri, comparison.name) if store is None or store.is_file() else []
    if named and named[0] != comparison.methods[0]:
        raise ConfigError(
            f"experiment {comparison.name!r} holds the comparison {' '.join(named)}, paired with {named[0]}; name "
            f"{named[0]} first to resume or extend it, or a new comparison with --experiment NAME"
        )


def _other_settings(comparison: Comparison, label: str, seed: int) -> ConfigError:
    return ConfigError(
        f"experiment {comparison.name!r} already holds a comparison of other settings ({label} seed {seed} ran with "
        "another config); name a new one with --experiment NAME"
    )


def _checked_cells(comparison: Comparison, tuned_of) -> list[tuple[str, int, Any]]:
    """(label, seed, run) of the experiment's FINISHED cells of ``comparison``'s methods whose config is the one
    ``comparison`` runs with the values ``tuned_of(label, run)`` (None: a method not asked for, passed over);
    a cell of another config is a one-line error."""
    client = store_client(comparison.uri)
    experiment = client.get_experiment_by_name(comparison.name)
    if experiment is None:
        return []
    query = f"attributes.status = 'FINISHED' and tags.`{NAME}` = {literal(comparison.name)}"
    cells = []
    for found in every_run(client, experiment.experiment_id, query):
        if found.data.tags.get(KIND) == COMPARE:  # the comparison's own run (finished, before it is reopened)
            continue
        label, seed = found.data.tags.get(VARIANT, found.data.tags["method"]), int(found.data.tags["seed"])
        tuned = tuned_of(label, found) if label in comparison.methods else None
        if tuned is None:
            continue
        try:
            same = found.data.tags.get(HASH) == provenance.config_hash(comparison.config(label, seed, tuned))
        except ConfigError:  # its values do not even build under this comparison's setting
            same = False
        if not same:
            raise _other_settings(comparison, label, seed)
        cells.append((label, seed, found))
    return cells


def open_run(comparison: Comparison, scored: dict[str, str]) -> Tracker:
    """The comparison's own MLflow run (re-opened when the comparison resumes); ``scored``: :func:`scoring`'s."""
    uri = comparison.uri
    tracker = Tracker(uri)
    first = comparison.config(comparison.methods[0], comparison.seeds[0], {})
    note = (
        f"raysim compare {' '.join(comparison.methods)}: seeds {list(comparison.seeds)}; {comparison.tuning(scored)}; "
        f"each cell {provenance.describe(first, first)}"
    )
    # what this command asked for, which a command run again with more seeds or methods changes (params cannot)
    asked = {MLFLOW_RUN_NOTE: note, METHODS_TAG: " ".join(comparison.methods), SEEDS_TAG: str(len(comparison.seeds))}
    experiment = tracker.client.get_experiment_by_name(comparison.name)
    if experiment is not None:
        query = f"tags.`{KIND}` = '{COMPARE}' and tags.`{NAME}` = {literal(comparison.name)}"
        for found in tracker.client.search_runs([experiment.experiment_id], filter_string=query):
            tracker.attach(found.info.run_id)
            tracker.set_tags(asked)
            return tracker
    tags = {
        KIND: COMPARE,
        NAME: comparison.name,
        "dataset": first.data.dataset,
        "partition": first.data.partition,
        "precision": first.train.precision,
        **asked,
        **provenance.provenance_tags(first.resources.gpus_per_client > 0),
    }
    params = {
        METHODS_TAG: " ".join(comparison.methods),
        SEEDS_TAG: len(comparison.seeds),
        "compare.tune_budget": comparison.tune_budget,
    }
    tracker.start(comparison.name, comparison.name, params, tags)
    return tracker


def execute(comparison: Comparison) -> tuple[str, list[Path]]:
    """Tune (if asked), run the missing cells, and write the report (inside ``sole_runner``, which the CLI holds);
    the comparison's run ends FINISHED with the report, FAILED, or KILLED after Ctrl-C."""
    refuse_other_settings(comparison)
    tuned, scored = tuned_values(comparison)
    tracker = open_run(comparison, scored)
    end_stopped_cells(comparison, tracker.run_id)  # a killed comparison's cells: RUNNING in MLflow beside their reruns
    status, stopped = "FAILED", None
    try:
        done = finished_cells(comparison, tuned)
        todo = [(m, s) for s in comparison.seeds for m in comparison.methods if (m, s) not in done]
        if todo:
            _run_cells(comparison, tuned, scored, todo, tracker.run_id)
        asked = {(m, s) for m in comparison.methods for s in comparison.seeds}
        missing = asked - finished_cells(comparison, tuned)
        if missing:
            cells = ", ".join(cell_label(m, s) for m, s in sorted(missing))
            raise SweepError(f"comparison {comparison.name}: {cells} did not finish; run the same command to retry")
        uri = comparison.uri
        folder = Path(comparison.folder) / "report"
        # the cells asked for, not those of other arms or seeds an earlier command added to the experiment
        arranged = Arranged(uri, comparison.name, list(comparison.methods), asked)  # the store read once for both
        table, paths = write_arranged(arranged, folder)
        for path in paths:
            tracker.log_artifact(path)
        tracker.log_metrics(comparison_metrics(arranged), step=0)
        status = "FINISHED"
        return table, paths
    except KeyboardInterrupt as stop:
        status, stopped = "KILLED", stopped_at(stop)
        done, total = len(finished_cells(comparison, tuned)), len(comparison.methods) * len(comparison.seeds)
        raise RunInterrupted(
            f"stopped comparison {comparison.name} with {done} of {total} cells done; run the same command to resume",
            stop_signum(stop),
        ) from None
    finally:
        end_stopped_cells(comparison, tracker.run_id, stopped)
        tracker.end(status)


def end_stopped_cells(comparison: Comparison, own_run: str, stopped: float | None = None) -> None:
    """Mark KILLED the cells a stopped Tune left RUNNING (their trial was killed before its run could end), or a
    comparison whose process was killed (before a resumed one runs them again); and those that failed on their way
    out after the stop at ``stopped`` (:class:`~raysim.sweep.tune_console.TuneStopped`)."""
    end_running(comparison.uri, comparison.name, NAME, comparison.name, own_run, failed_since=stopped)


def _run_cells(comparison: Comparison, tuned: dict, scored: dict, todo: list[tuple[str, int]], parent: str) -> None:
    """The cells as Tune trials (FIFO, all at their full length), each seed's data partitioned once, here."""
    shards = {seed: prepare_shards(comparison.config(comparison.methods[0], seed, {})) for seed in {s for _, s in todo}}
    first = comparison.config(*todo[0], tuned[todo[0][0]])
    rounds = {cell_label(m, s): comparison.config(m, s, tuned[m]).federation.rounds for m, s in todo}
    finished = len(comparison.methods) * len(comparison.seeds) - len(todo)
    trainable = tune.with_resources(
        tune.with_parameters(
            _cell,
            comparison=comparison,
            tuned=tuned,
            scored=scored,
            shards=shards,
            parent=parent,
            command=provenance.command_line(),
        ),
        tune.PlacementGroupFactory(sweeping.bundles(first)),
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"cell": tune.grid_search(todo)},
        tune_config=tune.TuneConfig(max_concurrent_trials=comparison.max_concurrent),
        run_config=tune.RunConfig(
            name=f"{folder_name(comparison.name)}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=comparison.folder,
            verbose=0,  # Tune's trial tables give way to CellProgress
            callbacks=[CellProgress(rounds, finished)],
        ),
    )
    fit(tuner)
