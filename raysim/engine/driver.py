"""The driver: validate, connect to Ray, build the shards, drive the rounds with the callbacks, track in MLflow.

:func:`run` is the one entry point (the CLI, sweeps and tests call it). The rounds run in a
:class:`~raysim.engine.simulation.Simulation`, here (sequential backend) or in the ``Coordinator`` actor (Ray); the
driver receives one report per round. When the coordinator dies, :func:`drive` starts a new one from the last
checkpoint and replays the rounds since, which give the same numbers (every draw derives from the run seed), so
the run ends as if nothing had happened.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import signal
import tempfile
import time
from contextlib import ExitStack, nullcontext, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import ray
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raysim.actors.coordinator import Coordinator
from raysim.actors.proxy import ActorProxy, unwrapped
from raysim.base.errors import ConfigError, RecoveriesExhausted, RunInterrupted, SimulationLost, Terminated
from raysim.base.memory import trim_memory
from raysim.base.paths import ray_job_working_dir, sqlite_file, unwritable
from raysim.base.precision import native_bf16_cpu
from raysim.base.ray_start import wait_for_ray
from raysim.base.sole_runner import run_lock
from raysim.base.stop_signals import finishing
from raysim.config import Config, as_recorded, build_config, dump_yaml
from raysim.core.registry import get_method
from raysim.data.partition_plot import PartitionArtifacts, partition_artifacts
from raysim.data.shards import ShardStore
from raysim.engine.callbacks import (
    Callback,
    Checkpointing,
    CommunicationTotals,
    MethodDiagnostics,
    MLflowLogger,
    PoolPlacementLogger,
    ProgressBar,
    StopOnCtrlC,
)
from raysim.engine.ray_connect import connect_ray_during, joined_address
from raysim.engine.ray_session import Pool, PoolReservation
from raysim.engine.setup import initial_state, prepare_shards, resolved
from raysim.ops.metrics import summarise
from raysim.privacy import calibration
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import provenance
from raysim.tracking.mlflow import (
    SUMMARY,
    TRAINABLE,
    Tracker,
    check_run,
    check_store,
    import_store,
    rounds_reported,
    summary_metrics,
)
from raysim.tracking.plots import plot_accuracy_curves, plot_client_accuracy, plot_type_accuracy, type_accuracy_table
from raysim.tracking.progress import RoundProgress, print_summary

if TYPE_CHECKING:
    from raysim.core.messages import GlobalState

log = logging.getLogger("raysim")

MAX_RECOVERIES = 3  # in a row without a round completing; then the error stands
RESULTS = "results"  # a run's checkpoint folder's: the final files until the driver has logged them


@dataclass
class RunResult:
    """What a finished run returns: its MLflow id, the per-round history and the last-10 summary."""

    run_id: str
    history: list[dict[str, float]]
    summary: dict[str, dict[str, float]]
    client_acc: dict[int, float] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)


def start_coordinator():
    """A Coordinator actor on this node (checkpoints it writes land where the driver reads them), before the run has
    its state: its process imports torch and the engine meanwhile (while the pool's first worker builds the model,
    in a run's set-up), and :func:`make_simulation` gives it the run."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return Coordinator.options(scheduling_strategy=here).remote()


def make_simulation(
    config: Config,
    shards: ShardStore | ray.ObjectRef,
    start: ckpt.Checkpoint,
    pool: Pool | None = None,
    callbacks: list[Callback] = (),
    coordinator=None,
):
    """A Simulation in this process (sequential backend, ``pool`` None) or, behind a proxy, in a Coordinator actor
    on this node (Ray): ``coordinator``, one :func:`start_coordinator` started earlier, else a new one. ``shards``:
    the store, or (Ray) the object :func:`shared` put it in."""
    callbacks = [MethodDiagnostics(), CommunicationTotals(), *callbacks]
    if pool is None:
        from raysim.engine.simulation import Simulation  # torch: the sequential backend's driver runs the rounds

        return Simulation(config, shards, ckpt.with_tensors(start), None, callbacks)
    placed = shards if isinstance(shards, ray.ObjectRef) else ray.put(shards)
    simulation = ActorProxy(coordinator or start_coordinator(), "the coordinator")
    simulation.begin(config, [placed], start, pool, callbacks)  # start-up happens here, not in round 1
    return simulation


def stop(simulation, graceful: bool) -> None:
    """Stop the pool and the coordinator; ``graceful=False`` (an error or a second Ctrl-C) kills at once."""
    if not isinstance(simulation, ActorProxy):
        simulation.shutdown()
        return
    try:
        if graceful:
            simulation.shutdown()
    finally:
        end_coordinator(simulation.handle)


@dataclass
class Outcome:
    """Where the rounds ended: the last checkpoint written (the final round's when they ran to the end; its manifest
    only), whether the user stopped them early, and else the run's results (:meth:`Simulation.results
    <raysim.engine.simulation.Simulation.results>`: the method's run metrics and the final files)."""

    last: ckpt.Checkpoint
    interrupted: bool
    results: tuple[dict[str, float], list[str]] = ({}, [])
    abandoned: bool = False  # the round in flight was lost while stopping (Ray went down with the stop's signal)


def shared(shards: ShardStore) -> tuple[ray.ObjectRef, ShardStore]:
    """``shards`` put in the object store once (a restarted coordinator reads the same object), and the store the
    driver keeps: a block in memory becomes the object store's copy (a read-only view), so the driver does not hold
    the rows twice; a block in a file stays the driver's map (the object is its path; the file goes with that map)."""
    placed = ray.put(shards)
    return placed, shards if isinstance(shards.images, np.memmap) else ray.get(placed)


def drive(
    config: Config,
    shards: ShardStore | ray.ObjectRef,
    start: ckpt.Checkpoint,
    pool: Pool | None,
    run_folder: Path,
    callbacks: list[Callback],
    results_folder: Path,
    coordinator=None,
) -> Outcome:
    """Rounds ``start.round + 1 .. config.federation.rounds`` with the driver's ``callbacks``; the simulation writes
    checkpoints every ``checkpoint.every`` rounds, after the last and when a callback stops the run early, and after
    the last round its results into ``results_folder``; the driver keeps the ``checkpoint.keep`` newest of those
    whose round's report it holds (:func:`~raysim.tracking.checkpoint.prune`), so a recovery finds its checkpoint.
    The rounds a recovery replays give the same numbers and reach the callbacks once, the first time they ran.
    ``coordinator``: the one :func:`start_coordinator` started for the first simulation (a recovery starts anew)."""
    rounds, keep = config.federation.rounds, config.checkpoint.keep
    last_folder, last_round, failures, graceful = None, start.round, 0, False
    reported = start.round  # the last round whose report the callbacks have had

    def simulate(point: ckpt.Checkpoint, coordinator=None):
        checkpointing = Checkpointing(run_folder, start.tracking_uri, point.client_files)
        return make_simulation(config, shards, point, pool, [checkpointing], coordinator)

    simulation = simulate(start, coordinator)
    for callback in callbacks:
        callback.on_start(simulation)
    round, stopped, abandoned = start.round + 1, False, False
    try:
        while round <= rounds and not stopped:
            try:
                report = simulation.run_round(round)
            except SimulationLost as error:
                if any(callback.stopping for callback in callbacks):
                    # the stop's signal reached Ray's own processes too (SIGTERM to the process group: timeout,
                    # SLURM): the round in flight is abandoned, the run stops at its last checkpoint
                    log.warning("round %d: %s while stopping; the round is abandoned", round, error)
                    stopped = abandoned = True
                    break
                failures += 1
                if failures > MAX_RECOVERIES:
                    raise RecoveriesExhausted(
                        f"round {round} failed {failures} times in a row ({error})",
                        resumable=last_folder is not None or start.round > 0,
                    ) from error
                log.warning("round %d: %s; restarting from the checkpoint of round %d", round, error, last_round)
                stop(simulation, graceful=False)
                ckpt.prune(run_folder, keep, confirmed=last_round)  # the lost round's, if it was written
                simulation = simulate(ckpt.load(last_folder, tensors=False) if last_folder else start)
                round = last_round + 1
                continue
            if round > reported:  # progress: a replayed round that succeeds again proves nothing
                failures = 0
                stopped = any([callback.after_round(round, report) for callback in callbacks]) and round < rounds
                reported = round
            else:  # a round replayed after a recovery: its report already reached the callbacks
                stopped = any(callback.stopping for callback in callbacks) and round < rounds
            folder = report.checkpoint or (simulation.checkpoint() if stopped else None)
            if folder:
                last_folder, last_round = folder, round
                ckpt.prune(run_folder, keep, confirmed=round)
            round += 1
        results = ({}, []) if stopped else simulation.results(str(results_folder))
        graceful = not abandoned
        if abandoned:
            ckpt.prune(run_folder, keep, confirmed=last_round)
        if last_folder is None and start.round == 0:  # abandoned in the first round: no checkpoint to resume from
            signums = [getattr(callback, "signum", None) for callback in callbacks if callback.stopping]
            raise Terminated if signal.SIGTERM in signums else KeyboardInterrupt
        last_folder = last_folder or start.folder
        last = ckpt.load(last_folder, clients=False, tensors=False)
        return Outcome(last, interrupted=stopped, results=results, abandoned=abandoned)
    finally:
        for callback in callbacks:
            callback.on_end()
        stop(simulation, graceful)


def _remove_if_empty(folder: Path) -> None:
    with suppress(OSError):  # not empty: the run's checkpoints
        folder.rmdir()


def describe(config: Config, shards: ShardStore) -> str:
    """One line with what is about to run."""
    fed, data, res = config.federation, config.data, config.resources
    where = "sequential" if res.backend == "sequential" else f"ray ({joined_address(res)[0] or 'local'})"
    precision = config.train.precision
    if precision == "bf16":
        precision += " (--precision fp32 for float32)"
    elif get_method(config.method).bf16 and res.gpus_per_client == 0 and native_bf16_cpu():
        precision += " (this CPU has bf16: --precision bf16 is faster)"
    if fed.asynchronous:
        step = "FedAsync" if fed.buffer_size == 1 else f"FedBuff, buffer {fed.buffer_size}"
        schedule = (
            f"{fed.concurrent_clients} in flight, {len(shards.unseen)} unseen) x {fed.rounds} server versions ({step})"
        )
    else:
        schedule = f"{fed.clients_per_round}/round, {len(shards.unseen)} unseen) x {fed.rounds} rounds"
    line = (
        f"{config.method} | {data.dataset}/{data.partition} | {fed.clients} clients ({schedule} | "
        f"{config.model.backbone} | {precision} | {where} | seed {fed.seed}"
    )
    privacy = budget(config, shards)
    return f"{line} | {privacy}" if privacy else line


def run(
    config: Config,
    *,
    show_progress: bool = True,
    console=None,
    resume: ckpt.Checkpoint | None = None,
    callbacks: list[Callback] = (),
    shards: ShardStore | None = None,
    tags: dict[str, str] | None = None,
) -> RunResult:
    """Run one simulation end to end (or continue ``resume``'s) and return its history; the MLflow run ends
    FINISHED, FAILED or KILLED.

    Everything that can reject the input (store, resumed run, cluster, data, partition, weights, pool size)
    runs before the MLflow run is created or reopened, so bad input leaves nothing behind. The first Ctrl-C
    finishes the round, writes a checkpoint and raises :class:`RunInterrupted` with the resume command.
    ``callbacks`` run in the driver after the built-in ones (a Tune trial reports there); ``shards``: the data
    already partitioned for this config (a sweep prepares them once for all its trials, ``raysim run`` while Ray
    starts); ``tags``: added to a new run's own (a sweep's trial names its parent run).
    """
    uri = config.tracking.resolved_uri
    given, config = config, checked(config, resume)
    drawn: list[PartitionArtifacts] = []  # the partition's summary, counts and picture, drawn while the model builds
    meanwhile = partial(_while_the_model_builds, uri, shards if resume is None else None, drawn)
    with PoolReservation(config) if config.resources.backend == "ray" else nullcontext() as reservation:
        set_up = partial(_set_up, config, shards, uri, reservation)
        config, initial, trainable, shards, tracker, coordinator = connect_ray_during(
            config.resources, set_up, meanwhile
        )
        if resume is None:
            config = named(config)
        try:  # with its privacy budget: a noise the accountant cannot account stops here, before the run opens
            header = describe(config, shards)
        except BaseException:
            end_coordinator(coordinator)
            raise
        pool = reservation.start(config, shards.info.num_classes) if reservation is not None else None
        placed = shards
        if pool is not None:
            placed, shards = shared(shards)
        status, held = "FAILED", ExitStack()
        try:
            if resume is None:
                record = recorded(config, pool)
                run_tags = {**provenance.run_tags(config, given), **(tags or {})}
                dataset = provenance.dataset_input(config, shards)
                run_id = tracker.start(
                    config.tracking.experiment, config.tracking.run_name, record.flat(), run_tags, dataset
                )
                start = ckpt.Checkpoint(run_id, 0, config.to_dict(), initial, {}, uri)
                run_folder = config.checkpoint.root(uri) / run_id
                run_folder.mkdir(parents=True, exist_ok=True)
                held.callback(_remove_if_empty, run_folder)  # a run stopped before its first checkpoint: none
                held.enter_context(run_lock(run_folder, run_id))  # a resume started while the run runs is refused
                _log_setup(tracker, record, drawn[0] if drawn else partition_artifacts(shards))
                tracker.log_metrics({TRAINABLE: trainable, **noise_of(config, shards)}, step=0)
            else:
                provenance.refuse_other_data(tracker.client, resume.run_id, config, shards)
                provenance.refuse_other_weights(tracker.client, resume.run_id, config)
                tracker.attach(resume.run_id)
                _log_unlogged_rounds(tracker, resume.history)
                if config.federation.rounds != resume.config["federation"]["rounds"]:
                    config = _record_extension(tracker, config, given, pool, resume)
                run_id, start, run_folder = resume.run_id, resume, resume.folder.parent
            trim_memory()  # what the set-up thread freed (reads, decodes, imports): glibc keeps it until asked
            # the run's final files, written where the state lives: beside the checkpoints, which the coordinator
            # writes where the driver reads them
            results_folder = run_folder / RESULTS
            try:
                with RoundProgress(
                    config.federation.rounds,
                    header,
                    enabled=show_progress,
                    console=console,
                    done=start.round,
                ) as progress:
                    stopper = StopOnCtrlC(progress.note)
                    logged = rounds_reported(uri, run_id) if resume is not None else 0
                    built_in = [
                        MLflowLogger(tracker, logged),
                        PoolPlacementLogger(tracker),
                        ProgressBar(progress),
                        stopper,
                    ]
                    every = [*built_in, *callbacks]
                    try:
                        outcome = drive(config, placed, start, pool, run_folder, every, results_folder, coordinator)
                    except RecoveriesExhausted as lost:
                        then = (
                            f"resume with: {resume_command(config, run_id, run_folder)}"
                            if lost.resumable
                            else "no checkpoint was written; run it again"
                        )
                        raise RecoveriesExhausted(f"{lost}; {then}", lost.resumable) from lost
                last = outcome.last
                if outcome.interrupted:
                    status = "KILLED"
                    if outcome.abandoned and reservation is not None:  # ask nothing more of a Ray that went down
                        coordinator = None
                        reservation.forget()
                    raise RunInterrupted(
                        f"stopped after round {last.round} of {config.federation.rounds}; checkpoint "
                        f"{last.folder}; resume with: {resume_command(config, run_id, run_folder)}",
                        stopper.signum or signal.SIGINT,
                        ray_lost=outcome.abandoned,
                    )
                # the evaluations this run's schedule makes: not the final one of the length a resume extended
                summary = summarise([h for h in last.history if config.federation.evaluates(int(h["round"]))])
                with finishing(progress.note):
                    _log_results(tracker, config, last, summary, shards, outcome.results)
            finally:
                shutil.rmtree(results_folder, ignore_errors=True)  # logged to MLflow
            print_summary(summary, run_id, config, console, last.history)
            status = "FINISHED"
            return RunResult(run_id, last.history, summary, last.client_acc, last.records)
        # Ctrl-C; or Tune stopping a trial (its report exits the trial's thread)
        except (KeyboardInterrupt, SystemExit):
            status = "KILLED"
            raise
        finally:
            try:
                end_coordinator(coordinator)  # stopped with its rounds; here if they never began
                tracker.end(status)
            finally:
                held.close()  # a trial's process lives on: its lock must not


def checked(config: Config, resume: ckpt.Checkpoint | None = None) -> Config:
    """``config`` resolved (:func:`~raysim.engine.setup.resolved`) once its store, the run ``resume`` continues and
    the checkpoints' folder were found usable: the checks that need neither Ray nor the data."""
    uri = config.tracking.resolved_uri
    check_store(uri, config.tracking.experiment)
    if resume is not None:
        check_run(uri, resume.run_id)
    checkpoints = config.checkpoint.root(uri)
    check_outlives_ray_job(uri, checkpoints)
    blocked = unwritable(checkpoints)
    if blocked is not None:
        raise ConfigError(
            f"checkpoint.dir {checkpoints} is not writable (cannot create files in {blocked}); pass --set "
            "checkpoint.dir=SOME/WRITABLE/DIR"
        )
    res = config.resources
    gpus = [(key, getattr(res, key)) for key in ("gpus_per_client", "server_gpus") if getattr(res, key)]
    if res.backend == "sequential" and gpus:
        import torch  # the sequential backend trains in this process, which imports torch anyway

        if not torch.cuda.is_available():
            key, value = gpus[0]
            raise ConfigError(
                f"resources.{key}={value:g} asks for a GPU, but torch sees none in this process (the sequential "
                f"backend computes here); drop it, or install a CUDA build of torch"
            )
    return resolved(config)


def check_outlives_ray_job(uri: str, checkpoints: Path) -> None:
    """Refuse a run started by ``ray job submit --working-dir`` that would write its MLflow store or its checkpoints
    in the job's working directory, which Ray deletes when the job ends."""
    job_folder = ray_job_working_dir()
    if job_folder is None:
        return
    for what, path in (("its MLflow store", sqlite_file(uri)), ("its checkpoints", checkpoints)):
        if path is not None and path.resolve().is_relative_to(job_folder):
            raise ConfigError(
                f"this Ray job would write {what} in its working directory {job_folder}, which Ray deletes when the "
                "job ends: pass --tracking-uri (the head's MLflow server, e.g. http://127.0.0.1:5000, or "
                "sqlite:////ABSOLUTE/PATH/mlflow.db) and --set checkpoint.dir=~/raysim-runs/checkpoints"
            )


def _set_up(
    config: Config, shards: ShardStore | None, uri: str, reservation: PoolReservation | None
) -> tuple[Config, GlobalState | ray.ObjectRef, float, ShardStore, Tracker, object]:
    """While Ray starts (``connect_ray_during``): the run's data (unless given), its initial state (with the cached
    features; built in ``reservation``'s pool on the Ray backend, while the coordinator's process starts), and then
    its tracker on the store ``uri`` (checked by :func:`check_store`), which MLflow opens (0.5-1 s; 1-1.7 s to create
    a new one) only once the data and the weights were found good (split learning's server, which the coordinator
    starts, built its blocks too). The coordinator is None on the sequential backend, and ended when the set-up
    fails."""
    shards = shards if shards is not None else prepare_shards(config)
    coordinator = None
    if reservation is not None:
        wait_for_ray()
        coordinator = start_coordinator()
    try:
        config, initial, trainable, shards = initial_state(config, shards, reservation)
        if coordinator is not None and get_method(config.method).split_learning:
            pool = reservation.start(config, shards.info.num_classes)  # the pool the set-up started
            unwrapped(coordinator.start_server.remote(config, shards.info.num_classes, pool))
        return config, initial, trainable, shards, Tracker(uri), coordinator
    except BaseException:
        end_coordinator(coordinator)
        raise


def _while_the_model_builds(uri: str, shards: ShardStore | None, drawn: list[PartitionArtifacts]) -> None:
    """What the driver's thread does once Ray is up while the set-up waits for the model's build (nothing that has an
    effect outside the process): import the store's modules, and add the partition's artifacts of ``shards`` to
    ``drawn``, which a new run logs once its MLflow run exists."""
    import_store(uri)
    if shards is not None:
        drawn.append(partition_artifacts(shards))


def end_coordinator(coordinator) -> None:
    """Kill ``coordinator`` (an actor handle, or None); a coordinator already ended is left as it is."""
    if coordinator is not None:
        ray.kill(coordinator)


def named(config: Config) -> Config:
    """``config`` with its run's name: the user's, else one that identifies the run (the same config, the same
    name: :func:`raysim.tracking.provenance.run_name`)."""
    if config.tracking.run_name:
        return config
    return dataclasses.replace(
        config, tracking=dataclasses.replace(config.tracking, run_name=provenance.run_name(config))
    )


def _log_unlogged_rounds(tracker: Tracker, history: list[dict[str, float]]) -> None:
    """Log the rounds of a resumed run's checkpoint whose metrics MLflow lacks (its process killed after it wrote a
    round's checkpoint and before it logged that round), so that the run holds every round."""
    steps: dict[str, set[int]] = {}  # a metric's logged rounds, read once
    for entry in history:
        metrics = {key: value for key, value in entry.items() if key != "round"}
        if not metrics:
            continue
        key = min(metrics)
        if key not in steps:
            steps[key] = {m.step for m in tracker.client.get_metric_history(tracker.run_id, key)}
        if entry["round"] not in steps[key]:
            tracker.log_metrics(metrics, step=entry["round"])


def _record_extension(
    tracker: Tracker, config: Config, given: Config, pool: Pool | None, resume: ckpt.Checkpoint
) -> Config:
    """``config``, resumed with another ``--rounds``, as the run now records it: its ``config.yaml``, its
    description and, where raysim named the run, its name (that of a run of the new length: the rounds it shares with
    one ran alike). MLflow keeps a param's first value, so the params still say the rounds the run started with."""
    started = build_config(config.method, [as_recorded(resume.config), {"tracking": {"run_name": None}}])
    if config.tracking.run_name == provenance.run_name(started):
        config = named(dataclasses.replace(config, tracking=dataclasses.replace(config.tracking, run_name=None)))
        tracker.client.update_run(tracker.run_id, name=config.tracking.run_name)
    tracker.log_text(dump_yaml(recorded(config, pool)), "config.yaml")
    tracker.set_tags({MLFLOW_RUN_NOTE: provenance.describe(config, given)})
    return config


def recorded(config: Config, pool: Pool | None) -> Config:
    """``config`` as the run records it (params, ``config.yaml``): where it tracks and checkpoints, and the size of
    the pool it ran on (1 in-process worker for the sequential backend), made concrete. The run itself keeps the
    settings as given, so a resumed run sizes its pool and finds its store as the user asks."""
    uri = config.tracking.resolved_uri
    return dataclasses.replace(
        config,
        resources=dataclasses.replace(config.resources, workers=pool.workers if pool is not None else 1),
        tracking=dataclasses.replace(config.tracking, tracking_uri=uri),
        checkpoint=dataclasses.replace(config.checkpoint, dir=str(config.checkpoint.root(uri))),
    )


def resume_command(config: Config, run_id: str, run_folder: Path) -> str:
    """The shortest ``raysim run`` line that continues this run from where its checkpoints are."""
    default = config.tracking.tracking_uri is None and config.checkpoint.dir is None
    return f"raysim run {config.method} --resume {run_id if default else run_folder}"


def _log_setup(tracker: Tracker, config: Config, partition: PartitionArtifacts) -> None:
    """``config.yaml`` and the partition's summary, counts and picture
    (:func:`~raysim.data.partition_plot.partition_artifacts`)."""
    tracker.log_text(dump_yaml(config), "config.yaml")
    tracker.log_json(partition.summary, "partition_summary.json")
    tracker.log_bytes(partition.counts, "partition_counts.safetensors")
    tracker.log_bytes(partition.picture, "partition.png")


def _log_results(
    tracker: Tracker,
    config: Config,
    last: ckpt.Checkpoint,
    summary,
    shards: ShardStore,
    results: tuple[dict[str, float], list[str]],
) -> None:
    """The run's summary, its figures, and the simulation's ``results`` (:attr:`Outcome.results`: the method's run
    metrics, the final global state and the method's figures, which its files are already)."""
    history, client_acc = last.history, last.client_acc
    title = f"{config.method} on {config.data.dataset}/{config.data.partition}"
    result = {
        "run_id": last.run_id,
        "method": config.method,
        "summary": summary,
        "final": history[-1],
        "client_acc": {str(c): a for c, a in client_acc.items()},
        "finished_at": time.time(),
    }
    tracker.log_json(result, "summary.json")
    run_metrics, files = results
    if run_metrics:
        tracker.log_metrics(run_metrics, step=0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plot_accuracy_curves(history, title, tmp / "accuracy_curves.png")
        curves = [tmp / "accuracy_curves.png"]
        if config.clocked:
            plot_accuracy_curves(history, title + ": time to accuracy", tmp / "time_to_accuracy.png", x="sim_time_s")
            curves.append(tmp / "time_to_accuracy.png")
        coded = config.compression
        if coded.on:  # against the bytes of the direction compressed (uplink first)
            path, x = tmp / "accuracy_vs_bytes.png", "bytes_up_total" if coded.uplink != "none" else "bytes_down_total"
            plot_accuracy_curves(history, f"{title}: {coded.uplink} uplink, {coded.downlink} downlink", path, x=x)
            curves.append(path)
        plot_client_accuracy(client_acc, title + " (final)", tmp / "client_accuracy.png")
        figures = []
        if shards.client_domain is not None and client_acc:
            unseen = set(shards.unseen)
            seen_acc = {c: a for c, a in client_acc.items() if c not in unseen}  # the clients sigma_type takes
            table = type_accuracy_table(seen_acc, shards.client_domain, shards.info.domain_names)
            tracker.log_json(table, "type_accuracy.json")
            plot_type_accuracy(table, title + ": accuracy per client type (final)", tmp / "type_accuracy.png")
            figures.append(tmp / "type_accuracy.png")
        state, method_files = files[0], files[1:]  # global_state.safetensors first
        for path in [*curves, tmp / "client_accuracy.png", state, *method_files, *figures]:
            tracker.log_artifact(path)
    tracker.log_metrics(summary_metrics(summary), step=0)  # one value per run: MLflow draws step-0 metrics as bars
    if "privacy_epsilon" in history[-1]:  # the budget the run spent
        tracker.log_metrics({f"{SUMMARY}privacy_epsilon": history[-1]["privacy_epsilon"]}, step=0)


def budget(config: Config, shards: ShardStore) -> str:
    """The run's privacy in words, for its header: the mode, z, the clip and the budget it will have spent after the
    last round (``""`` for a run without privacy settings)."""
    p = config.privacy
    secure = "secure aggregation" if p.secure_aggregation else ""
    if p.noise_by == "clients":
        secure += f", the noise added by the clients (distributed over at least {p.min_survivors})"
    if not p.private:
        return secure
    units = calibration.record_units(config, shards)
    z = calibration.noise_multiplier(config, units)
    epsilon = calibration.spent(config, config.federation.rounds, units)
    level = "user-level" if p.mode == "user" else "record-level"
    words = (
        f"{level} DP, z={z:.4g}, clip {p.clip}: epsilon {epsilon:.3g} at delta {p.delta:g} after the last round "
        f"({calibration.relation(config)})"
    )
    return f"{words}, {secure}" if secure else words


def noise_of(config: Config, shards: ShardStore) -> dict[str, float]:
    """A private run's noise multiplier z (given, or calibrated to its target), logged once at step 0."""
    if not config.privacy.private:
        return {}
    return {"privacy_noise_multiplier": calibration.noise_multiplier(config, calibration.record_units(config, shards))}
