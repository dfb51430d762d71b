"""What the driver logs at the end of a run, against the run's own metrics."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from raysim.engine.driver import run
from raysim.testing.smoke import smoke_config

TYPED_WITH_UNSEEN = {  # on the tests' tiny setting: 9 clients of the synthetic data's domains, 3 held out
    "federation": {"clients": 9, "rounds": 1, "seed": 3, "unseen_fraction": 0.34},
    "data": {"partition": "domains"},
    "checkpoint": {"every": 0},
}


def test_the_per_type_table_rests_on_the_clients_sigma_type_rests_on(tracking_uri):
    """Held-out clients are evaluated (unseen_acc) but are no type's member in sigma_type; the table of accuracy per
    client type takes the same clients, so its means' spread is the run's final sigma_type."""
    config = smoke_config("fedvpt", TYPED_WITH_UNSEEN, {"tracking": {"tracking_uri": tracking_uri}})
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))
    client = MlflowClient(tracking_uri)
    table = json.loads(Path(client.download_artifacts(result.run_id, "type_accuracy.json")).read_text())
    seen = len(result.client_acc) - config.federation.unseen_clients
    assert config.federation.unseen_clients == 3 and sum(row["clients"] for row in table.values()) == seen
    spread = float(np.std([row["mean_acc"] for row in table.values()]))
    assert spread == pytest.approx(result.history[-1]["sigma_type"])


class Reached(Exception):
    """The stand-in simulation got to the round after the one it loses."""


class LosesRound:
    """A simulation whose round ``lost`` loses its process ``times`` times (every time: None), whose rounds before it
    succeed without a checkpoint (``checkpoint.every=0``) and whose next round raises :class:`Reached`."""

    def __init__(self, lost: int, times: int | None, started: list):
        self.lost, self.times, self.started = lost, times, started
        started.append(self)

    def run_round(self, round):
        from types import SimpleNamespace

        from raysim.base.errors import SimulationLost

        failed = sum(s.failed for s in self.started[:-1])
        self.failed = round == self.lost and (self.times is None or failed < self.times)
        if self.failed:
            raise SimulationLost("the coordinator died (ActorDiedError)")
        if round > self.lost:
            raise Reached
        return SimpleNamespace(checkpoint=None, metrics={})

    def shutdown(self):
        pass


@pytest.mark.parametrize("times", [2, None])
def test_a_round_lost_again_and_again_stops_the_run_even_when_the_rounds_before_it_replay(tmp_path, monkeypatch, times):
    """Recoveries count per round lost, not since the last round that ran: with no checkpoint since the start, each
    recovery replays rounds 1-2, which succeed, and must not reset the count, or a round lost every time recovers
    forever. A round lost twice recovers; one lost every time stops after MAX_RECOVERIES, with no checkpoint to
    resume from."""
    from raysim.base.errors import RecoveriesExhausted
    from raysim.engine import driver
    from raysim.tracking import checkpoint as ckpt

    started: list[LosesRound] = []
    monkeypatch.setattr(driver, "make_simulation", lambda *args: LosesRound(3, times, started))
    monkeypatch.setattr(driver, "Checkpointing", lambda *args: None)
    config = smoke_config("fedavg", {"federation": {"rounds": 4}, "checkpoint": {"every": 0}})
    start = ckpt.Checkpoint("run", 0, config.to_dict(), {}, {}, "sqlite:///unused.db")

    def drive():
        return driver.drive(config, None, start, None, tmp_path / "run", [], tmp_path / "results")

    if times is not None:
        with pytest.raises(Reached):
            drive()
        assert len(started) == times + 1
        return
    with pytest.raises(RecoveriesExhausted, match=r"^round 3 failed 4 times in a row \(the coordinator died") as lost:
        drive()
    assert len(started) == driver.MAX_RECOVERIES + 1 and not lost.value.resumable


def test_a_run_whose_round_is_lost_every_time_ends_failed_in_one_line_with_the_resume_command(
    tmp_path, monkeypatch, capsys
):
    from click.testing import CliRunner

    from raysim.base.errors import RecoveriesExhausted
    from raysim.cli import main
    from raysim.engine import driver

    def lost(*args):
        raise RecoveriesExhausted("round 3 failed 4 times in a row (the coordinator died (ActorDiedError))", True)

    monkeypatch.setattr(driver, "drive", lost)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["run", "fedavg", "--preset", "quick", "--backend", "sequential", "--no-progress", "--tracking-uri", uri]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    (run,) = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("raysim").experiment_id])
    assert result.stderr.strip().splitlines()[-1] == (
        "raysim: error: round 3 failed 4 times in a row (the coordinator died (ActorDiedError)); resume with: "
        f"raysim run fedavg --resume {tmp_path / 'checkpoints' / run.info.run_id}"
    )
    assert run.info.status == "FAILED" and "Traceback" not in result.stderr
