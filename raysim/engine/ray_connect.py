"""Ray for a run: join a cluster, or start a lean local one, on the calling thread while another thread prepares
the run (:func:`connect_ray_during`). Imports Ray and nothing of torch or MLflow, so ``raysim run`` starts Ray
before it imports the driver (``raysim.cli``)."""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import ray

from raysim.base.errors import ConfigError
from raysim.base.ray_start import starting_ray
from raysim.base.settings import differs
from raysim.base.stop_signals import kept_sigterm
from raysim.engine.ray_auth import (
    RAY_AUTH_LOGGER,
    RAY_AUTH_MODE,
    default_token_path,
    ensure_token,
    quiet_default_auth,
    refuse_unless_admitted,
)

T = TypeVar("T")
log = logging.getLogger("raysim")

HIDE_UNRESERVED_GPUS = "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"  # see connect_ray
RAY_ADDRESS = "RAY_ADDRESS"  # an address the user exported, or Ray set for a job's entrypoint: joined as --address

LEAN = {  # a local Ray for one run: no idle workers started up front, and none kept once idle (actors are not idle)
    "prestart_worker_first_driver": False,
    "num_workers_soft_limit": 0,
}


def connect_ray(resources) -> None:
    """Join ``resources.address`` or start a local Ray; reuse an open session.

    Without an address (``--address``, else ``$RAY_ADDRESS``, which Ray sets for a job's entrypoint) the local Ray is
    the run's own (Ray's ``address="local"``), whatever ``ray start`` left running or behind on the machine (a plain
    ``ray.init()`` would join that cluster, or fail on its stale address file): ``--address auto`` joins the user's.

    A local Ray keeps token authentication on (Ray 2.60's default for a local cluster: its services listen on the
    machine's address, not on loopback alone), with the user's token (:func:`ensure_token`) and without Ray's
    warning that it chose it, unless the user set ``RAY_AUTH_MODE``; the dashboard starts only with ``--dashboard``
    (then on ``dashboard_host``, 127.0.0.1 by default); it keeps no idle worker processes (``LEAN``), and a worker
    that reserved no GPU sees none. A cluster's settings are the cluster's own (cluster/README.md; its configs hide
    unreserved GPUs too).
    """
    if ray.is_initialized():
        return
    warn_of_another_raysim(Path.cwd())
    kwargs = dict(logging_level=logging.WARNING, configure_logging=True)
    address, given = joined_address(resources)
    refuse_unused_dashboard(resources, address, given)
    if address:
        check_reachable(address, given)
        try:
            with kept_sigterm():
                ray.init(address=address, **kwargs)
        except Exception as error:
            reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
            raise ConfigError(
                f"could not connect to Ray at {address!r} ({reason}); start a cluster "
                f"with 'ray start --head' or 'ray up cluster/onprem.yaml', or drop {given}"
            ) from None
    else:
        if RAY_AUTH_MODE not in os.environ:  # Ray turns token authentication on, with the token file
            ensure_token(default_token_path())
            logging.getLogger(RAY_AUTH_LOGGER).addFilter(quiet_default_auth)
        # Ray 2.60 no longer hides the GPUs from a worker that reserved none: a client worker on the CPU would see
        # them and train there (``pick_device``) unreserved. This restores the hiding (Ray issue 54868).
        os.environ.setdefault(HIDE_UNRESERVED_GPUS, "1")
        with kept_sigterm():
            ray.init(
                address="local",
                include_dashboard=resources.dashboard,
                dashboard_host=resources.dashboard_host,
                _system_config=LEAN,
                **kwargs,
            )


def refuse_unused_dashboard(resources, address: str | None, given: str, rounds_on_ray: bool = True) -> None:
    """One line where a dashboard setting would do nothing: ``--dashboard`` where the run joins a cluster (which has
    its own) or where its rounds do not run on Ray (``rounds_on_ray`` false: the sequential backend trains its
    clients in this process), and a ``dashboard_host`` without ``--dashboard``."""
    if resources.dashboard and address:
        raise ConfigError(
            f"--dashboard (resources.dashboard) starts a local Ray's dashboard, and this run joins the cluster at "
            f"{address!r} ({given}), whose dashboard is its own ('ray dashboard CLUSTER.yaml', or port 8265 of its "
            "head): drop --dashboard"
        )
    if resources.dashboard and not rounds_on_ray:
        raise ConfigError(
            "--dashboard (resources.dashboard) starts a local Ray's dashboard, and the sequential backend starts "
            "none (its clients train in this process): drop --dashboard, or use --backend ray"
        )
    if not resources.dashboard and differs(resources, "dashboard_host"):
        raise ConfigError(
            f"resources.dashboard_host={resources.dashboard_host} is where --dashboard listens; add --dashboard, or "
            "drop the host"
        )


def joined_address(resources) -> tuple[str | None, str]:
    """(the Ray address a run joins, where it came from): ``--address``, else ``$RAY_ADDRESS`` (set by the user, or by
    Ray for a job's entrypoint); None: the run starts a local Ray of its own."""
    if not resources.address and os.environ.get(RAY_ADDRESS):
        return os.environ[RAY_ADDRESS], RAY_ADDRESS
    return resources.address, "--address"


def warn_of_another_raysim(folder: Path) -> None:
    """Ray puts the driver's working directory first on every worker's ``sys.path``: a run started in ``folder``
    holding a raysim package whose code differs from the one running here (a wheel installed from a checkout that
    changed since, run in the checkout) would run that folder's code in its workers. Says so, before Ray starts."""
    import raysim

    ours, theirs = Path(raysim.__file__).parent, folder / "raysim"
    if (theirs / "__init__.py").is_file() and theirs.resolve() != ours.resolve() and sources(theirs) != sources(ours):
        log.warning(
            "the workers will import %s (Ray puts the working directory first on their path), whose code differs "
            "from the raysim this command runs (%s): start it from another folder, or install this one with "
            "'pip install -e .'",
            theirs,
            ours,
        )


def sources(package: Path) -> dict[str, bytes]:
    """Every Python file of ``package`` (its linked folders too) by its path inside it."""
    found = {}
    for folder, _, files in os.walk(package, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                path = Path(folder, name)
                found[str(path.relative_to(package))] = path.read_bytes()
    return found


def connect_ray_during(resources, work: Callable[[], T], meanwhile: Callable[[], None] | None = None) -> T:
    """:func:`connect_ray` on this thread while ``work`` (reading the data, building the initial state) runs on
    another; ``work``'s result, or its error once Ray is up. What in ``work`` needs Ray waits for it
    (:func:`raysim.base.ray_start.wait_for_ray`: Ray Data generating or decoding a data set, the one-machine check).
    ``meanwhile`` runs on this thread once Ray is up, if ``work`` is still running (what ``work`` will need next and
    that has no effect outside the process, such as an import).

    A local Ray takes about 3 s to start, the driver waiting for its daemons: the data and the initial state are
    ready in that time (1.7 s less start-up in ``bench/scale.py`` at 100 x 200 with a cold decode cache). Ray stays
    on the calling thread, because the daemons it starts are killed when the thread that started them ends (Linux's
    parent-death signal is per thread).

    The sequential backend without ``--address`` starts no Ray (its clients train in this process), unless ``work``
    asks for it (:func:`raysim.base.ray_start.ensure_ray`: Ray Data generating a glyph set on its first run, reading
    CIFAR or decoding image folders on every run); then this thread starts the local one, and stops it once ``work``
    ended (its rows are the process's own arrays by then: ``data.sources.load_dataset``), so that no daemon, Ray
    Data worker or object store holds memory through the rounds. ``work`` runs on its own thread there too: the heap
    its reads and decodes free is handed back at the run's start (``base.memory.trim_memory``), while on this
    thread's heap, under what stays, about 200 MB of it was not (``bench/scale.py`` at 100 x 200). ``meanwhile`` runs
    at once there, and this thread then waits for ``work`` (serving its requests for Ray). Where Ray is up already (a
    Tune trial), it is used, and left up.
    """
    if not ray.is_initialized():  # before the work starts: a refused run reads and writes nothing
        refuse_unused_dashboard(resources, *joined_address(resources), rounds_on_ray=resources.backend == "ray")
    without_ray = resources.backend == "sequential" and not resources.address and not ray.is_initialized()
    asked = queue.SimpleQueue()  # a request for Ray from ``work`` (an Event to set once it is up); None: work ended
    outcome = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # re-raised on the calling thread
            outcome["error"] = error
        finally:
            asked.put(None)

    thread = threading.Thread(target=target, name="raysim-setup", daemon=True)
    if without_ray:
        thread.ask_for_ray = asked.put
        thread.start()
        if meanwhile is not None:
            meanwhile()
        while (started := asked.get()) is not None:
            try:
                with starting_ray(thread):
                    connect_ray(resources)  # once: then Ray is up
            finally:
                started.set()
        if ray.is_initialized():  # started here for work's Ray Data, which is done with it (Ctrl-C: left to exit)
            ray.shutdown()
    else:
        with starting_ray(thread):
            thread.start()
            connect_ray(resources)
        if meanwhile is not None and thread.is_alive():
            meanwhile()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def check_reachable(address: str, given: str = "--address", timeout_s: float = 3.0) -> None:
    """Fail in seconds, not minutes, when nothing listens at a HOST:PORT Ray address ('auto' is Ray's own check);
    ``given`` names where the address came from (``--address``, or ``RAY_ADDRESS``)."""
    if address == "auto":
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{given} {address!r} must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ConfigError(
            f"could not connect to Ray at {address!r} (nothing answers on {host}:{port}: "
            f"{error.strerror or error}); start a cluster with 'ray start --head' or drop {given}"
        ) from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):  # under TLS, Ray's own check
        import grpc  # Ray's own dependency

        with grpc.insecure_channel(f"{host}:{port}") as channel:
            refuse_unless_grpc(channel, address, given, timeout_s)
            if "://" not in address:  # the GCS's address (ray:// is Ray Client's server, which checks on its own)
                refuse_unless_admitted(channel, address, given, timeout_s)


def refuse_unless_grpc(channel, address: str, given: str, timeout_s: float) -> None:
    """Fail in seconds where what answers on ``channel`` does not speak gRPC, as Ray's GCS and its client server do:
    Ray's own connection retries such a service (a web server, a database) for minutes."""
    import grpc

    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        host_port = address.split("://", 1)[-1]
        raise ConfigError(
            f"could not connect to Ray at {address!r} ({host_port} answers, but not as Ray: no gRPC within "
            f"{timeout_s:g} s); pass the address 'ray start --head' printed, or drop {given}"
        ) from None
