"""The attacks' recorded runs: a method's smoke run, tracked in a store of its own with its checkpoints beside it;
a split-learning run with what its server received at each local step."""

from __future__ import annotations

import io

import pytest
import torch
from mlflow.tracking import MlflowClient
from rich.console import Console

from raysim.algorithms._split import EncoderServer
from raysim.algorithms.fedv.method import FedV
from raysim.engine.driver import run
from raysim.testing.smoke import smoke_config


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, empty_store):
    """``tracked_run(method, *layers) -> (tracking URI, run id)``: ``method``'s smoke config with ``layers`` on top,
    run to its end in a fresh copy of the empty store (checkpoints under its folder, the newest kept)."""

    def tracked(method: str, *layers: dict) -> tuple[str, str]:
        folder = tmp_path_factory.mktemp(method)
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        (folder / "mlflow.db").write_bytes(empty_store.read_bytes())
        where = {"tracking": {"tracking_uri": uri}, "checkpoint": {"dir": str(folder / "checkpoints"), "keep": 1}}
        result = run(smoke_config(method, *layers, where), show_progress=False, console=Console(file=io.StringIO()))
        return uri, result.run_id

    return tracked


@pytest.fixture
def nested_run():
    """``nested_run(uri, parent, output)``: the attack's run a ``raysim attack`` command's last line names, checked
    to be finished and nested under the attacked run ``parent``."""

    def found(uri: str, parent: str, output: str):
        run_id = output.strip().splitlines()[-1].split("attack run ")[1].split(",")[0]
        run = MlflowClient(tracking_uri=uri).get_run(run_id)
        assert run.data.tags["mlflow.parentRunId"] == parent and run.info.status == "FINISHED"
        return run

    return found


@pytest.fixture(scope="module")
def split_run(tracked_run):
    """A tracked two-round FedV run on the sequential backend (heads and tails averaged after round 1), and what its
    server received and computed at each local step, by (round, client): the smashed features, the encoder's outputs
    and the gradients the tails returned."""
    received: dict[tuple[int, int], list[torch.Tensor]] = {}
    computed: dict[tuple[int, int], list[torch.Tensor]] = {}
    returned: dict[tuple[int, int], list[torch.Tensor]] = {}
    forward, backward, configure = EncoderServer.forward, EncoderServer.backward, FedV.configure
    current = [0]

    def configured(self, round, state, client_ids):
        current[0] = round
        return configure(self, round, state, client_ids)

    def spied_forward(self, key, h):
        out = forward(self, key, h)
        if key is not None:
            received.setdefault((current[0], key[0]), []).append(h.clone())
            computed.setdefault((current[0], key[0]), []).append(out[0].clone())
        return out

    def spied_backward(self, key, grad_out, keep_for=None):
        returned.setdefault((current[0], key[0]), []).append(grad_out.clone())
        return backward(self, key, grad_out, keep_for)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EncoderServer, "forward", spied_forward)
        patch.setattr(EncoderServer, "backward", spied_backward)
        patch.setattr(FedV, "configure", configured)
        uri, run_id = tracked_run("fedv", {"federation": {"rounds": 2}})
    return uri, run_id, received, (computed, returned)
