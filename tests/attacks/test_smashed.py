"""Smashed-data inversion: its objective by hand, an exact inversion through a known linear head, the features the
capture holds against those the split-learning server received in the run (bit for bit), and the command's run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.algorithms._split import EncoderServer
from raysim.algorithms.fedv.method import FedV
from raysim.attacks import scores
from raysim.attacks.capture import capture
from raysim.attacks.harness import reconstruct_smashed
from raysim.attacks.recorded import recorded_config
from raysim.attacks.smashed import SmashedSettings, feature_distance, invert_smashed
from raysim.base.errors import ConfigError
from raysim.cli import main


def test_the_feature_distance_by_hand():
    observed = torch.tensor([[[3.0, 4.0]]])  # ||h||^2 = 25
    assert float(feature_distance(torch.tensor([[[3.0, 1.0]]]), observed)) == pytest.approx(9 / 25)


def test_a_known_linear_head_is_inverted_exactly():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 4, generator=generator)  # full column rank: one input per feature vector
    x = torch.rand(2, 1, 2, 2, generator=generator)

    def head(inputs):
        return (inputs.flatten(1) @ weight.T).unsqueeze(1)  # [B, 1 token, 6]

    box = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    found = invert_smashed(head, head(x), (1, 2, 2), box, SmashedSettings(iterations=400, lr=0.05, tv=0.0))
    assert torch.allclose(found.inputs, x, atol=1e-3) and found.loss < 1e-6


def test_more_rows_than_reconstructions_pair_the_closest_rows():
    originals = np.stack([np.full((2, 2, 1), v) for v in (0.0, 0.5, 1.0)])
    reconstructions = np.stack([np.full((2, 2, 1), v) for v in (0.98, 0.01)])
    assert scores.matched(originals, reconstructions) == [(0, 1), (2, 0)]


@pytest.fixture(scope="module")
def recorded(tracked_run):
    """A tracked two-round FedV run on the sequential backend (heads averaged after round 1), and the features its
    server received in each local step, by (round, client)."""
    received: dict[tuple[int, int], list[torch.Tensor]] = {}
    forward, configure = EncoderServer.forward, FedV.configure
    current = [0]

    def configured(self, round, state, client_ids):
        current[0] = round
        return configure(self, round, state, client_ids)

    def spied(self, key, h):
        if key is not None:
            received.setdefault((current[0], key[0]), []).append(h.clone())
        return forward(self, key, h)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EncoderServer, "forward", spied)
        patch.setattr(FedV, "configure", configured)
        uri, run_id = tracked_run("fedv", {"federation": {"rounds": 2}})
    return uri, run_id, received


def test_the_captured_features_are_what_the_server_received_bit_for_bit(recorded):
    uri, run_id, received = recorded
    captured = capture(recorded_config(uri, run_id), 2)
    sent = {client: steps for (r, client), steps in received.items() if r == 2 and client in captured.updates}
    assert sent and set(captured.smashed) == set(sent)
    for client, steps in sent.items():
        assert len(captured.smashed[client]) == len(steps)
        assert all(torch.equal(a, b) for a, b in zip(captured.smashed[client], steps)), client


def test_after_the_average_the_broadcast_head_reveals_the_first_steps_rows(recorded):
    """Round 2's clients start from the heads averaged after round 1, which the server holds: their first step's
    features invert to their rows; round 1's clients drew their own heads, which the server never saw."""
    uri, run_id, _ = recorded
    config = recorded_config(uri, run_id)
    settings = SmashedSettings()
    late = capture(config, 2)
    found = reconstruct_smashed(late, min(late.updates), 1, "broadcast", settings)
    early = capture(config, 1)
    guessed = reconstruct_smashed(early, min(early.updates), 1, "broadcast", settings)
    assert min(found.psnr) > 40 and max(guessed.psnr) < 25, (found.psnr, guessed.psnr)
    with pytest.raises(ConfigError, match="pass --step between 1 and"):
        reconstruct_smashed(late, min(late.updates), 99, "broadcast", settings)


def test_a_smashed_data_attack_is_a_run_nested_under_the_attacked_one(recorded):
    uri, run_id, received = recorded
    client = min(c for r, c in received if r == 2)
    result = CliRunner().invoke(
        main, ["attack", "smashed", "--run", run_id, "--tracking-uri", uri, "--round", "2", "--clients", str(client)]
    )
    assert result.exit_code == 0, result.output
    run_id_out = result.output.strip().splitlines()[-1].split("attack run ")[1].split(",")[0]
    attack_run = MlflowClient(tracking_uri=uri).get_run(run_id_out)
    assert attack_run.data.tags["mlflow.parentRunId"] == run_id
    assert {"psnr", "ssim", "seconds"} <= set(attack_run.data.metrics)
    assert "labels_recovered" not in attack_run.data.metrics
