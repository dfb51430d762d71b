"""``raysim tune METHOD``: a Ray Tune sweep whose trials are whole simulations, each its own MLflow run.

A trial reserves its driver and its worker pool together (one placement group: a bundle for the trial, which
loads the data and logs to MLflow, and one per client worker; the coordinator needs no CPU), reports every
evaluated round to Tune with the round's raysim checkpoint (so ASHA can stop it early and an interrupted sweep
resumes mid-trial), and logs to the experiment named after the sweep, nested under the sweep's own run (its
description, the space, and at the end the report of its trials as artifacts). At the end the best trial's config
is saved as a preset file and printed as a ``raysim run`` command that reproduces its metrics.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import yaml
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NOTE, MLFLOW_SOURCE_NAME
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from rich.console import Console

from raysim.base.errors import ConfigError, RunInterrupted, SweepError, last_line
from raysim.base.paths import absolute
from raysim.base.sole_runner import run_lock, sole_runner
from raysim.config import (
    NOT_COMPUTED,
    Config,
    beside_store,
    build_config,
    check_runnable,
    load_preset,
    preset_for_method,
)
from raysim.config.partition_keys import refuse_unread_partition_keys
from raysim.core.registry import get_method
from raysim.engine.driver import run
from raysim.engine.ray_connect import connect_ray
from raysim.engine.setup import prepare_shards, refuse_unrunnable, resolved
from raysim.ops.metrics import PRIVACY_KEYS, SUMMARY_WINDOW, reported_metrics
from raysim.sweep.lost_checkpoints import ForgetLostCheckpoints
from raysim.sweep.space import (
    BUDGET_KEYS,
    SearchSpace,
    as_layer,
    corners,
    default_space_file,
    load_space,
    with_private_levers,
)
from raysim.sweep.trial_progress import RoundsToTune, SweepProgress
from raysim.sweep.tune_console import fit, quiet_trial_exit, quiet_trial_logs, stop_signum, stopped_at
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import provenance
from raysim.tracking.mlflow import KIND, SWEEP, Tracker, check_store, end_running, store_client
from raysim.tracking.report import write_report

SCHEDULERS = ("asha", "fifo")
SWEEP_TAG = "raysim.sweep"  # on every trial's run: the sweep it belongs to
SWEEP_FILE, BEST_FILE = "sweep.json", "best.yaml"

quiet_trial_logs()  # here, at import: a trial's process imports this module (for _trial) before Tune restores it


@dataclass(frozen=True)
class Sweep:
    """What a sweep needs to run or resume: the method, the trial config layers, the space, the objective."""

    method: str
    name: str
    before: list[dict]  # preset (and the space's fixed values after it)
    after: list[dict]  # flags and --set, then the store and experiment pinned for every trial
    space: SearchSpace
    metric: str
    mode: str
    num_samples: int
    max_concurrent: int
    scheduler: str
    storage: str
    parent_run_id: str | None = None  # the sweep's MLflow run (None: a sweep planned before sweeps had one)
    command: str = ""  # the command line that started it: its trials' source (they run in Ray's workers)

    @property
    def trials(self) -> int:
        """How many trials the sweep runs: ``num_samples`` times the space's grid points."""
        return self.num_samples * self.space.grid_points()

    def trial_config(self, params: dict[str, Any]) -> Config:
        return build_config(self.method, [*self.before, as_layer(self.space.fixed), *self.after, as_layer(params)])

    def describe(self) -> str:
        """One line: the command, what is sampled, how trials are ranked, and what every trial runs."""
        return f"raysim tune {self.method}: {self.plan_line()}"

    def plan_line(self) -> str:
        """:meth:`describe` less the command (``raysim compare`` opens each arm's sweep with it)."""
        sampled = ", ".join(f"{k} {kind} {provenance.show(v)}" for k, (kind, v) in self.space.samplers.items())
        base = self.trial_config({})
        trials = f"{self.trials} trial" + ("s" if self.trials != 1 else "")
        if self.trials != self.num_samples:
            samples = f"{self.num_samples} sample" + ("s" if self.num_samples != 1 else "")
            trials += f" ({samples} x {self.space.grid_points()} grid points)"
        return (
            f"{trials} sampling {sampled} ({Path(self.space.source).name}), ranked by {self.mode} {self.metric}"
            f" (last-10 mean; {self.scheduler}); each trial {provenance.describe(base, base, self.space.samplers)}"
        )


def check_objective(method: str, metric: str, mode: str, scheduler: str) -> None:
    """One-line errors for a metric the method does not report, a bad mode or scheduler."""
    known = reported_metrics(get_method(method))
    if metric not in known:
        raise ConfigError(f"--metric {metric!r} is not reported by {method}; valid metrics: {', '.join(sorted(known))}")
    if mode not in ("max", "min"):
        raise ConfigError(f"--mode {mode!r} must be 'max' or 'min'")
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"--scheduler {scheduler!r} is not one of {', '.join(SCHEDULERS)}")


def refuse_unreported_metric(metric: str, probe: Config) -> None:
    """A one-line error for a metric the method reports only in other settings than the trials': held-out clients'
    accuracy without held-out clients, the type metrics without client types, the privacy figures without privacy."""
    why = None
    if metric == "unseen_acc" and probe.federation.unseen_clients == 0:
        why = "holds out no clients (set federation.unseen_fraction)"
    elif metric in ("sigma_type", "avg_acc") and probe.data.partition != "domains":
        why = "gives its clients no types (--partition domains)"
    elif metric == "secagg_lost" and not probe.privacy.secure_aggregation:
        why = "runs without secure aggregation"
    elif metric in PRIVACY_KEYS and metric != "secagg_lost" and not probe.privacy.private:
        why = "runs without differential privacy"
    if why:
        raise ConfigError(f"--metric {metric!r}: the trials would never report it, as their config {why}")


HEAD_NODE = "node:__internal_head__"  # Ray's resource of the head node: 1 there, absent on every other node
DRIVER = {"CPU": 1.0, HEAD_NODE: 0.001}  # a trial's driver, on the head node


def bundles(config: Config) -> list[dict[str, float]]:
    """The trial's placement group: its own driver (1 CPU: data, MLflow) and one bundle per worker (the first worker
    also builds the model's initial state: :func:`raysim.engine.setup.initial_state`). The driver's bundle sits on
    the head node, where the sweep runs: the MLflow server the cluster's configurations bind to the head's loopback
    and Tune's storage folder are there, and a trial's coordinator, on its driver's node, writes its checkpoints
    there; its workers go wherever the cluster has room."""
    res = config.resources
    if res.backend == "sequential":
        return [dict(DRIVER)]
    workers = [{"CPU": res.cpus_per_client, **({"GPU": res.gpus_per_client} if res.gpus_per_client else {})}]
    return [dict(DRIVER)] + workers * max(1, res.workers)


def refuse_server_resources(config: Config) -> None:
    """A trial's (or cell's) placement group holds its driver and its workers (:func:`bundles`): split learning's
    server, an actor of the trial, can reserve nothing outside them, so one given CPUs or GPUs would wait for ever."""
    res = config.resources
    if get_method(config.method).split_learning and (res.server_cpus or res.server_gpus):
        raise ConfigError(
            f"{config.method}'s server runs inside each trial's placement group, which holds only the trial's driver "
            "and workers; leave resources.server_cpus and resources.server_gpus at 0 in a sweep or comparison"
        )


def plan_concurrency(config: Config, requested: int | None) -> int:
    """Trials at once: ``requested`` if the cluster can host that many placement groups, their drivers on the head
    node (:func:`bundles`), else an error; by default as many as fit (at least 1)."""
    total = ray.cluster_resources()
    need: dict[str, float] = {}
    for bundle in bundles(config):
        for key, value in bundle.items():
            if key != HEAD_NODE:
                need[key] = need.get(key, 0.0) + value
    head_cpus = next(
        (n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"] and HEAD_NODE in n["Resources"]), 0.0
    )
    if head_cpus < DRIVER["CPU"]:
        raise ConfigError(
            f"a trial's driver runs on the head node, beside the sweep's MLflow store and Tune's folder, and the head "
            f"has {head_cpus:g} CPUs; start the head node with at least 1 CPU (ray start --head --num-cpus N)"
        )
    fits = min(int(total.get(key, 0.0) // value) for key, value in need.items() if value > 0)
    if fits < 1:
        raise ConfigError(
            f"one trial needs {_describe(need)} and the cluster has {_describe(total)}; lower "
            f"--workers or --cpus-per-client"
        )
    drivers = int(head_cpus // DRIVER["CPU"])
    if requested is not None and requested > min(fits, drivers):
        hosts = (
            f"the cluster hosts {fits} ({_describe(total)})"
            if fits <= drivers
            else (f"the head node hosts {drivers} trial drivers ({head_cpus:g} CPUs, one a trial)")
        )
        raise ConfigError(
            f"--max-concurrent {requested} trials need {requested} x {_describe(need)}, and {hosts}; use "
            f"--max-concurrent {min(fits, drivers)} or fewer"
        )
    return requested or min(fits, drivers)


def _describe(resources: dict[str, float]) -> str:
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in ("CPU", "GPU") if k == "CPU" or resources.get(k))


DATA_KEYS = ("federation.clients", "federation.seed", "federation.unseen_fraction")  # and every data.* key
# what the privacy accountant reads, per privacy mode: sampled under a fixed noise multiplier, each trial would spend
# another epsilon
ACCOUNTED_KEYS = {
    "user": ("federation.participation", "federation.rounds", "federation.sampling"),
    "record": ("federation.rounds", "train.local_epochs", "train.batch_size"),
}


def refuse_spending_samplers(space: SearchSpace, probe: Config) -> None:
    """One line for a space that samples what the accountant reads while the trials' noise multiplier is fixed
    (``probe``: a trial's config before sampling): its trials would spend different budgets and be ranked by
    accuracy. Under ``privacy.target_epsilon`` each trial calibrates its own noise to the same budget."""
    privacy = probe.privacy
    if not privacy.private or privacy.target_epsilon is not None:
        return
    for key in space.samplers:
        if key in ACCOUNTED_KEYS.get(privacy.mode, ()):
            raise ConfigError(
                f"{Path(space.source).name}: space key {key!r} changes the epsilon each trial spends at "
                f"privacy.noise_multiplier={privacy.noise_multiplier:g}, and a sweep ranks its trials by accuracy; "
                f"set privacy.target_epsilon (each trial then calibrates its noise to it), or fix {key}"
            )


def refuse_unrunnable_corners(method: str, space: SearchSpace, layers: list[dict]) -> None:
    """One line for a space that can sample a trial ``method`` refuses (``fgpt.k`` above ``fgpt.groups``, say),
    found at the space's corners (:func:`~raysim.sweep.space.corners`, on top of the trials' ``layers``) before any
    trial starts, not when Tune samples it."""
    cls = get_method(method).cls
    for params in corners(space):
        try:
            config = build_config(method, [*layers, as_layer(params)])
            check_runnable(config)
            cls(config)
        except ConfigError as error:
            shown = ", ".join(f"{key}={provenance.show(value)}" for key, value in params.items())
            raise ConfigError(
                f"{Path(space.source).name}: the space can sample {shown}, which no trial could run ({error}); "
                "narrow the space"
            ) from None


class RunsTheLastRound(ASHAScheduler):
    """ASHA (Li et al., MLSys 2020) over the rounds, its first rung at a quarter of them, that never stops a trial at
    its last round's report: a trial that got there runs to its end, and its run logs its summary and figures. (A rung
    falls on the last round where the rounds are a multiple of 4, and at max_t ASHA stops every trial.)"""

    def __init__(self, rounds: int):
        super().__init__(time_attr="round", max_t=rounds + 1, grace_period=max(1, rounds // 4))
        self.rounds = rounds

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if result.get("round", 0) >= self.rounds:
            return self.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)


def _trial(params: dict[str, Any], sweep: Sweep, shards) -> None:
    """One trial: a whole raysim run nested under the sweep's, resumed after a restore from the run's own
    checkpoint of the round Tune's copy names (Tune copies only the round's folder; client states stay with the
    run's checkpoints). It is named as ``raysim run`` names it, so the best trial's command gives a run of its name."""
    quiet_trial_exit()
    config = sweep.trial_config(params)
    tags = {SWEEP_TAG: sweep.name, "raysim.trial": tune.get_context().get_trial_id()}
    if sweep.parent_run_id:
        tags[MLFLOW_PARENT_RUN_ID] = sweep.parent_run_id
    if sweep.command:
        tags[MLFLOW_SOURCE_NAME] = sweep.command
    resume, restored, held = None, tune.get_checkpoint(), nullcontext()
    if restored is not None:
        with restored.as_directory() as folder:
            copy = ckpt.load(folder, clients=False, tensors=False)
        run_folder = config.checkpoint.root(config.tracking.resolved_uri) / copy.run_id
        held = run_lock(run_folder, copy.run_id)  # as `raysim run --resume` holds it; a new run takes its own
        resume = ckpt.load(ckpt.round_folder(run_folder, copy.round), tensors=False)  # Tune's: checkpoint_NNNNNN
    with held:
        run(
            config,
            show_progress=False,
            console=Console(file=io.StringIO()),
            resume=resume,
            callbacks=[RoundsToTune(checkpoints=True)],
            shards=shards,
            tags=tags,
        )


def run_sweep(sweep: Sweep, resume_path: str | None = None):
    """Fit (or restore and finish) the sweep; returns Tune's ResultGrid."""
    first = sweep.trial_config({})
    # the data are read and partitioned once, here: every trial maps the same block from the object store
    # (Ray Data's own tasks would also find no free CPU inside a trial's placement group)
    shards = prepare_shards(first)
    trainable = tune.with_resources(
        tune.with_parameters(_trial, sweep=sweep, shards=shards),
        tune.PlacementGroupFactory(bundles(first)),
    )
    parent = Tracker(first.tracking.resolved_uri, sweep.parent_run_id) if sweep.parent_run_id else None
    if resume_path:
        # a trial's run that a killed sweep left RUNNING: a trial restored from a checkpoint opens it again, one
        # without (killed before its first round ended, or whose run opened as Ctrl-C ended the others) opens a new one
        end_running(first.tracking.resolved_uri, first.tracking.experiment, SWEEP_TAG, sweep.name)
        tuner = tune.Tuner.restore(resume_path, trainable, resume_errored=True)
        if parent is not None:
            parent.attach(sweep.parent_run_id)  # RUNNING again until the sweep ends
    else:
        if parent is not None:
            parent.log_dataset(provenance.dataset_input(first, shards))
        rounds = first.federation.rounds
        scheduler = RunsTheLastRound(rounds) if sweep.scheduler == "asha" else FIFOScheduler()
        tuner = tune.Tuner(
            trainable,
            param_space=sweep.space.tune_space(),
            tune_config=tune.TuneConfig(
                metric=sweep.metric,
                mode=sweep.mode,
                num_samples=sweep.num_samples,
                max_concurrent_trials=sweep.max_concurrent,
                scheduler=scheduler,
            ),
            run_config=tune.RunConfig(
                name=sweep.name,
                storage_path=sweep.storage,
                verbose=0,  # Tune's trial tables give way to SweepProgress
                callbacks=[SweepProgress(sweep.trials, rounds, sweep.metric), ForgetLostCheckpoints()],
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            ),
        )
    return fit(tuner)  # without Tune's restore hint: raysim tune --resume FOLDER is how a sweep resumes


def open_parent(sweep: Sweep) -> Sweep:
    """The sweep's own MLflow run, which its trials nest under: its description, provenance, data and space."""
    first = sweep.trial_config({})
    tags = {
        KIND: SWEEP,
        "method": sweep.method,
        "family": get_method(sweep.method).family,
        "dataset": first.data.dataset,
        "partition": first.data.partition,
        "precision": first.train.precision,
        MLFLOW_RUN_NOTE: sweep.describe(),
        **provenance.provenance_tags(first.resources.gpus_per_client > 0),
    }
    params = {f"sweep.{k}": getattr(sweep, k) for k in ("metric", "mode", "num_samples", "max_concurrent", "scheduler")}
    params["sweep.space"] = sweep.space.source
    params.update({f"space.{k}": f"{kind} {provenance.show(v)}" for k, (kind, v) in sweep.space.samplers.items()})
    run_id = Tracker(first.tracking.resolved_uri).start(first.tracking.experiment, sweep.name, params, tags)
    return dataclasses.replace(sweep, parent_run_id=run_id)


def end_parent(sweep: Sweep, status: str, folder: Path, best: dict[str, Any] | None = None) -> None:
    """End the sweep's run with ``status``; a finished sweep first logs the report of its trials (``report.md`` and
    its figures, written under ``folder``/report) and the best trial."""
    if not sweep.parent_run_id:
        return
    uri = sweep.trial_config({}).tracking.resolved_uri
    parent = Tracker(uri, sweep.parent_run_id)
    if best is not None:
        experiment = sweep.trial_config({}).tracking.experiment
        _, paths = write_report(uri, experiment, folder / "report", parent_run_id=sweep.parent_run_id)
        for path in paths:
            parent.log_artifact(path)
        parent.client.set_tag(sweep.parent_run_id, "raysim.best_run_id", best["run_id"])
        final, mean = best["metrics"][sweep.metric], best["score"]
        parent.log_metrics({f"summary/best_{sweep.metric}": final, f"summary/best_{sweep.metric}_mean": mean}, step=0)
    parent.end(status)


def execute(sweep: Sweep, folder: Path, resume_path: str | None = None) -> dict[str, Any]:
    """Run (or restore) the sweep and :func:`finish` it; its MLflow run ends FINISHED with the report, FAILED, or
    KILLED after Ctrl-C (:class:`RunInterrupted`, which says how to resume)."""
    status, best = "FAILED", None
    try:
        best = finish(sweep, run_sweep(sweep, resume_path), folder)
        status = "FINISHED"
        return best
    except KeyboardInterrupt as stop:
        status = "KILLED"
        config = sweep.trial_config({})  # the trials' runs end KILLED (a resumed trial's run is RUNNING again)
        uri, experiment = config.tracking.resolved_uri, config.tracking.experiment
        end_running(uri, experiment, SWEEP_TAG, sweep.name, failed_since=stopped_at(stop))
        raise RunInterrupted(
            f"stopped sweep {sweep.name}; resume with: raysim tune --resume {folder}", stop_signum(stop)
        ) from None
    except (ConfigError, SweepError):
        raise
    except Exception as error:  # Tune's own (its trials killed for memory, a lost node): one line, not its traceback
        config = sweep.trial_config({})  # trials whose processes died cannot end their runs
        end_running(config.tracking.resolved_uri, config.tracking.experiment, SWEEP_TAG, sweep.name)
        raise SweepError(
            f"sweep {sweep.name} stopped ({last_line(error)}); resume with: raysim tune --resume {folder}"
        ) from None
    finally:
        end_parent(sweep, status, folder, best)


def abandon(target: str) -> None:
    """End KILLED what a sweep that cannot be restored left RUNNING (its process killed before Tune first saved its
    state): its trials' runs and its own. A folder without a readable sweep leaves nothing to end."""
    try:
        sweep, _ = load_sweep(target)
    except ConfigError:
        return
    config = sweep.trial_config({})
    end_running(config.tracking.resolved_uri, config.tracking.experiment, SWEEP_TAG, sweep.name)
    client = store_client(config.tracking.resolved_uri)
    if sweep.parent_run_id and client.get_run(sweep.parent_run_id).info.status == "RUNNING":
        client.set_terminated(sweep.parent_run_id, status="KILLED")


def sweep_folder(sweep: Sweep) -> Path:
    """``<storage>/<name>``: Tune's experiment folder, which also holds ``sweep.json`` and the lock."""
    return Path(sweep.storage) / sweep.name


def sole_sweep_runner(sweep: Sweep, folder: Path, new: bool = False):
    """:func:`sole_runner` on the sweep's folder: a second process running or resuming it stops at once (one that
    would start a ``new`` sweep of a name in use is also told to pick another --name)."""
    resume = f"resume it with: raysim tune --resume {folder}" + ("; or give this one another --name" if new else "")
    return sole_runner(folder, f"sweep {sweep.name!r}", resume)


def refuse_taken(name: str, folder: Path) -> None:
    """A one-line error where a sweep of this name exists: checked when the sweep is planned, and again under the
    folder's lock (:func:`sole_sweep_runner`), since another process may have started the same name in between."""
    if (folder / SWEEP_FILE).exists():
        raise ConfigError(
            f"sweep {name!r} exists ({folder}); resume it with: raysim tune --resume {folder}, or give this one "
            "another --name"
        )


def save_sweep(sweep: Sweep) -> Path:
    """``sweep.json`` in the sweep's folder: what ``raysim tune --resume`` needs to rebuild the trainable."""
    folder = sweep_folder(sweep)
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        k: getattr(sweep, k)
        for k in (
            "method",
            "name",
            "before",
            "after",
            "metric",
            "mode",
            "num_samples",
            "max_concurrent",
            "scheduler",
            "storage",
            "parent_run_id",
            "command",
        )
    }
    record["space"] = {"source": sweep.space.source, "samplers": sweep.space.samplers, "fixed": sweep.space.fixed}
    (folder / SWEEP_FILE).write_text(json.dumps(record, indent=1))
    return folder


def refuse_unsaved(sweep: Sweep, folder: Path) -> None:
    """A one-line error for a sweep stopped before Ray Tune first saved its state (there is nothing to resume); what
    it left RUNNING in MLflow ends KILLED."""
    if not tune.Tuner.can_restore(str(folder)):
        abandon(str(folder))
        raise ConfigError(
            f"sweep {sweep.name} stopped before Ray Tune saved its state, so it cannot be resumed; remove {folder} "
            "and start it again with its command, or start it with another --name"
        )


def load_sweep(target: str) -> tuple[Sweep, Path]:
    """The sweep in folder ``target`` (``<storage>/<name>``, as printed when it started; relative to here or not)."""
    folder = Path(absolute(target))  # Ray Tune restores from absolute paths or URIs only
    try:
        record = json.loads((folder / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        raise ConfigError(
            f"--resume {target!r} is not a raysim sweep folder (no readable {SWEEP_FILE}); pass the "
            f"folder printed when the sweep started"
        ) from None
    space = record.pop("space")
    samplers = {k: (kind, values) for k, (kind, values) in space["samplers"].items()}
    return Sweep(space=SearchSpace(space["source"], samplers, space["fixed"]), **record), folder


def finish(sweep: Sweep, results, folder: Path) -> dict[str, Any]:
    """Mark trials that ASHA stopped early KILLED in MLflow, save the best config as a preset, and return
    {best params, metrics, run id, preset path, command}."""
    client = store_client(sweep.trial_config({}).tracking.resolved_uri)
    rounds = sweep.trial_config({}).federation.rounds
    for result in results:  # a trial the scheduler stopped ended without error before its last round
        run_id = (result.metrics or {}).get("run_id")
        if run_id and result.error is None and result.metrics.get("round", rounds) < rounds:
            client.set_tag(run_id, "raysim.tune", "stopped early by the scheduler")
            client.set_terminated(run_id, status="KILLED")
    errors = [r for r in results if r.error]
    best = best_trial(results, sweep.metric, sweep.mode, rounds)
    if best is None:  # the printed command runs every round, so only trials that ran them all can be reproduced
        reason = ""
        if errors:  # the error a trial raised, not Ray's wrapper of it
            cause = getattr(errors[0].error, "cause", None) or errors[0].error
            reason = f" ({type(cause).__name__}: {str(cause).splitlines()[0][:200]})"
        raise SweepError(f"no trial of sweep {sweep.name} reported {sweep.metric} after all {rounds} rounds{reason}")
    params = dict(best.config)
    config = sweep.trial_config(params).to_dict()
    preset = {k: v for k, v in config.items() if k not in ("method", *NOT_COMPUTED)}
    path = folder / BEST_FILE
    score = last_ten_mean(best, sweep.metric)
    path.write_text(
        f"# best trial of sweep {sweep.name}: {sweep.metric} last-10 mean {score:.4f} ({sweep.mode}), final "
        f"{best.metrics[sweep.metric]:.4f} at round {best.metrics['round']}\n" + yaml.safe_dump(preset, sort_keys=False)
    )
    return {
        "params": params,
        "metrics": best.metrics,
        "score": score,
        "run_id": best.metrics["run_id"],
        "preset": str(path),
        "command": f"raysim run {sweep.method} --preset {path}",
        "errors": len(errors),
    }


def best_trial(results, metric: str, mode: str, rounds: int):
    """The trial that ran all ``rounds`` with the best :func:`last_ten_mean` of ``metric`` (ties: the first trial);
    None if no trial ran them all."""
    done = [r for r in results if r.metrics and metric in r.metrics and r.metrics.get("round") == rounds]
    done.sort(key=lambda r: r.metrics["trial_id"])  # ties go to the first trial, however Tune orders its results
    if not done:
        return None
    return (max if mode == "max" else min)(done, key=lambda r: last_ten_mean(r, metric))


def last_ten_mean(result, metric: str) -> float:
    """A trial's ``metric`` averaged over its last 10 evaluated rounds (``SUMMARY_WINDOW``, the window of a run's own
    summary): the papers' protocol and what a run's and a comparison's reports lead with (the final round alone swings
    by points between evaluations). A round reported twice (a trial resumed from an earlier checkpoint) counts once,
    as last reported."""
    frame = result.metrics_dataframe.dropna(subset=[metric]).drop_duplicates("round", keep="last")
    return float(frame.sort_values("round")[metric].tail(SUMMARY_WINDOW).mean())


def plan(
    method: str,
    space_file: str | None,
    num_samples: int,
    max_concurrent: int | None,
    metric: str,
    mode: str,
    scheduler: str,
    name: str | None,
    preset: str | None,
    flag_layers: list[dict],
) -> Sweep:
    """Validate everything a sweep takes (space, objective, counts, store, cluster) before any trial starts."""
    get_method(method)
    check_objective(method, metric, mode, scheduler)
    if num_samples < 1:
        raise ConfigError(f"--num-samples {num_samples} must be at least 1")
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent {max_concurrent} must be at least 1")
    before = [preset_for_method(load_preset(preset), method)] if preset else []
    space = load_space(space_file or default_space_file(method), method, before, flag_layers)
    space = with_private_levers(space, method, before, flag_layers)
    for key in space.samplers:
        if key in BUDGET_KEYS:
            raise ConfigError(
                f"{Path(space.source).name}: space key {key!r} sets the privacy budget, and a sweep ranks its trials "
                f"by accuracy, so the trial that spends the most privacy would win; fix the budget (--set "
                f"privacy.target_epsilon=4 --set privacy.delta=1e-5) and compare budgets with separate runs"
            )
        if key.startswith("data.") or key in DATA_KEYS:
            raise ConfigError(
                f"{Path(space.source).name}: space key {key!r} changes the clients' data, which all "
                f"trials of a sweep share; fix it under 'fixed:' and sweep it with separate runs"
            )
        if key in ("federation.rounds", "federation.eval_every") or key.startswith(("tracking.", "checkpoint.")):
            raise ConfigError(
                f"{Path(space.source).name}: space key {key!r} cannot be sampled: a sweep ranks its trials over the "
                "same rounds and evaluations, in one experiment, each checkpointed alike; set it under 'fixed:' or "
                "with its flag (e.g. --rounds, --eval-every)"
            )
        if key.startswith("resources."):  # Tune reserves every trial alike, from the config before any sampling
            raise ConfigError(
                f"{Path(space.source).name}: space key {key!r} cannot be sampled: resources.* stay the same for every "
                f"trial of a sweep (Tune reserves each trial's CPUs and GPUs before it samples); set it under "
                f"'fixed:' or with its flag (e.g. --workers, --cpus-per-client)"
            )
    probe = build_config(method, [*before, as_layer(space.fixed), *flag_layers])
    refuse_unread_partition_keys(flag_layers, probe.data.partition)
    refuse_unreported_metric(metric, probe)
    refuse_spending_samplers(space, probe)
    refuse_server_resources(probe)
    refuse_unrunnable(probe)
    refuse_unrunnable_corners(method, space, [*before, as_layer(space.fixed), *flag_layers])
    name = name or f"{method}-{time.strftime('%Y%m%d-%H%M%S')}"
    experiment = probe.tracking.experiment if flag_set(flag_layers, "experiment") else name
    check_store(probe.tracking.resolved_uri, experiment)
    storage = beside_store(probe.tracking.resolved_uri) / "tune"
    refuse_taken(name, storage / name)
    connect_ray(probe.resources)
    sweep = Sweep(
        method,
        name,
        before,
        [*flag_layers, pinned_layer(probe, experiment)],
        space,
        metric,
        mode,
        num_samples,
        1,
        scheduler,
        str(storage),
        command=provenance.command_line(),
    )
    return dataclasses.replace(sweep, max_concurrent=plan_concurrency(sweep.trial_config({}), max_concurrent))


def pinned_layer(probe: Config, experiment: str) -> dict[str, dict[str, Any]]:
    """The config layer every trial of a sweep (or cell of a comparison) ends with. Trials run in their own working
    folders: the store, the experiment and every path are pinned to absolute ones (a config makes the data's and the
    weights' absolute where it is built, here the command's folder); the precision is resolved once, here, so every
    trial computes alike; a trial keeps the checkpoints back to its last evaluated round (the one Tune would
    restore)."""
    return {
        "tracking": {"tracking_uri": probe.tracking.resolved_uri, "experiment": experiment},
        "checkpoint": {
            "every": 1,
            "keep": probe.federation.eval_every + 1,
            "dir": str(probe.checkpoint.root(probe.tracking.resolved_uri)),
        },
        "train": {"precision": resolved(probe).train.precision},
        "data": {"data_dir": probe.data.data_dir},
        "model": {"weights": probe.model.weights},
    }


def check_store_and_ray(sweep: Sweep) -> None:
    """The store is usable and Ray is up (joining ``--address`` if given): before a sweep resumes."""
    config = sweep.trial_config({})
    check_store(config.tracking.resolved_uri)
    connect_ray(config.resources)


def flag_set(layers: list[dict], key: str) -> bool:
    """Whether the flag layers set ``tracking.KEY`` (``--experiment``, say)."""
    return any(key in layer.get("tracking", {}) for layer in layers)
