"""Smashed-data inversion: its objective by hand, an exact inversion through a known linear head, the inverse
network's patch layout and what it learns of a head, the features the capture holds against those the split-learning
server received in the run (bit for bit), and the command's run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from raysim.attacks import scores
from raysim.attacks.analytic import fold_patches
from raysim.attacks.capture import capture
from raysim.attacks.harness import attacker_model
from raysim.attacks.inverse_network import InverseSettings, invert_by_network
from raysim.attacks.recorded import recorded_config
from raysim.attacks.smashed import SmashedSettings, feature_distance, invert_smashed
from raysim.attacks.split_learning import public_pool, reconstruct_smashed, step_rows
from raysim.base.errors import ConfigError
from raysim.cli import main
from raysim.core.training import model_inputs


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


def test_patches_fold_back_into_the_image_they_were_cut_from():
    """A patch embedding whose weight is the identity on the flattened patch (channel first) sends each patch's
    pixels as its token, row-major over the grid; folding the tokens gives the image back."""
    image = torch.arange(2 * 4 * 6, dtype=torch.float32).reshape(1, 2, 4, 6)
    embed = torch.nn.Conv2d(2, 8, 2, 2, bias=False)
    with torch.no_grad():
        embed.weight.copy_(torch.eye(8).reshape(8, 2, 2, 2))
    tokens = embed(image).flatten(2).transpose(1, 2)  # [1, 6 patches, 8]
    assert tokens[0, 1].tolist() == [2.0, 3.0, 8.0, 9.0, 26.0, 27.0, 32.0, 33.0]  # row 0, column 1, both channels
    assert torch.equal(fold_patches(tokens, 2, 2, (2, 3)), image)


def smooth_images(count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` 1 x 4 x 4 images in [0, 1], bilinear from 2 x 2 noise."""
    coarse = torch.rand(count, 1, 2, 2, generator=generator)
    return torch.nn.functional.interpolate(coarse, size=(4, 4), mode="bilinear", align_corners=True)


def test_the_inverse_network_learns_the_head_it_is_trained_through():
    """Trained on public images through the client's affine patch embedding, the network decodes unseen rows' features
    (the patch layer's 8 outputs of 4 pixels: invertible); trained through another head, it does not."""
    generator = torch.Generator().manual_seed(0)
    heads = [torch.nn.Conv2d(1, 8, 2, 2) for _ in range(2)]
    for conv in heads:
        with torch.no_grad():
            conv.weight.copy_(torch.randn(8, 1, 2, 2, generator=generator))
            conv.bias.copy_(torch.randn(8, generator=generator))
    client, other = ((lambda x, c=conv: c(x).flatten(2).transpose(1, 2)) for conv in heads)
    public, rows = smooth_images(512, generator), smooth_images(4, generator)
    box = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    settings = InverseSettings(epochs=30, hidden=64)
    known = invert_by_network(client, client(rows), public, 2, box, settings)
    guessed = invert_by_network(other, client(rows), public, 2, box, settings)
    assert scores.psnr(rows.numpy(), known.inputs.numpy()) > 18 > 12 > scores.psnr(rows.numpy(), guessed.inputs.numpy())
    assert known.loss < 0.05 < guessed.loss


def test_more_rows_than_reconstructions_pair_the_closest_rows():
    originals = np.stack([np.full((2, 2, 1), v) for v in (0.0, 0.5, 1.0)])
    reconstructions = np.stack([np.full((2, 2, 1), v) for v in (0.98, 0.01)])
    assert scores.matched(originals, reconstructions) == [(0, 1), (2, 0)]


def test_exact_copies_of_infinite_psnr_are_paired_first():
    originals = np.stack([np.full((2, 2, 1), v) for v in (0.0, 0.5, 1.0)])
    reconstructions = np.stack([originals[2], originals[0], originals[1] + 0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero warning for a user to read
        assert scores.psnr(originals[2], reconstructions[0]) == float("inf")
        assert scores.matched(originals, reconstructions) == [(0, 1), (1, 2), (2, 0)]


def test_the_captured_features_are_what_the_server_received_bit_for_bit(split_run):
    uri, run_id, received, _ = split_run
    captured = capture(recorded_config(uri, run_id), 2)
    sent = {client: steps for (r, client), steps in received.items() if r == 2 and client in captured.updates}
    assert sent and set(captured.smashed) == set(sent)
    for client, steps in sent.items():
        assert len(captured.smashed[client]) == len(steps)
        assert all(torch.equal(a, b) for a, b in zip(captured.smashed[client], steps)), client


def test_after_the_average_the_broadcast_head_reveals_the_first_steps_rows(split_run):
    """Round 2's clients start from the heads averaged after round 1, which the server holds: their first step's
    features invert to their rows; round 1's clients drew their own heads, which the server never saw."""
    uri, run_id, _, _ = split_run
    config = recorded_config(uri, run_id)
    settings = SmashedSettings()
    late = capture(config, 2)
    found = reconstruct_smashed(late, min(late.updates), 1, "broadcast", settings)
    early = capture(config, 1)
    guessed = reconstruct_smashed(early, min(early.updates), 1, "broadcast", settings)
    assert min(found.psnr) > 40 and max(guessed.psnr) < 25, (found.psnr, guessed.psnr)
    with pytest.raises(ConfigError, match="pass --step between 1 and"):
        reconstruct_smashed(late, min(late.updates), 99, "broadcast", settings)


def test_a_later_step_is_scored_against_the_rows_of_that_step(split_run):
    """A step's features are those of the batch the client drew for that step (its batch plan): its reconstruction
    is scored against those rows, not against the nearest of all the client's rows."""
    uri, run_id, _, _ = split_run
    late = capture(recorded_config(uri, run_id), 2)
    client = min(late.updates)
    assert len(late.smashed[client]) >= 2
    (rows,) = step_rows(late, client, [2], late.smashed[client])
    found = reconstruct_smashed(late, client, 2, "broadcast", SmashedSettings(iterations=1))
    assert len(found.psnr) == len(rows) < len(late.shards.train(client))
    model, _ = attacker_model(late.config, late.shards.info.num_classes, None)
    _, mean, std = model.input_spec
    step_images = scores.to_pixels(model_inputs(model, late.shards.train(client).images[rows], "cpu"), mean, std)
    assert sorted(map(bytes, found.originals)) == sorted(map(bytes, step_images))
    assert sorted(found.true_labels) == sorted(late.shards.train(client).labels[rows].tolist())


@pytest.mark.parametrize(("inversion", "params"), [("search", {"iterations", "tv"}), ("network", {"epochs"})])
def test_a_smashed_data_attack_is_a_run_nested_under_the_attacked_one(split_run, inversion, params, nested_run):
    uri, run_id, received, _ = split_run
    client = min(c for r, c in received if r == 2)
    args = ["--round", "2", "--clients", str(client), "--inversion", inversion]
    result = CliRunner().invoke(main, ["attack", "smashed", "--run", run_id, "--tracking-uri", uri, *args])
    assert result.exit_code == 0, result.output
    attack_run = nested_run(uri, run_id, result.output)
    assert attack_run.data.params["inversion"] == inversion and params <= set(attack_run.data.params)
    assert {"psnr", "ssim", "seconds"} <= set(attack_run.data.metrics)
    assert "labels_recovered" not in attack_run.data.metrics


def test_the_inverse_network_through_the_broadcast_head_decodes_round_twos_rows(split_run):
    """Trained on other clients' test rows through the heads averaged after round 1, the network decodes a round-2
    client's first-step features to its rows; through the round-1 broadcast, which no round-1 client trained from (each
    drew its own head), it does not."""
    uri, run_id, _, _ = split_run
    config, settings = recorded_config(uri, run_id), InverseSettings(epochs=10)
    late, early = capture(config, 2), capture(config, 1)
    found = reconstruct_smashed(late, min(late.updates), 1, "broadcast", settings)
    guessed = reconstruct_smashed(early, min(early.updates), 1, "broadcast", settings)
    assert min(found.psnr) > 18 and max(guessed.psnr) < 16.5, (found.psnr, guessed.psnr)  # 21.0 and 14.4 here


def test_the_public_pool_holds_other_clients_test_rows_only(split_run):
    uri, run_id, _, _ = split_run
    captured = capture(recorded_config(uri, run_id), 2)
    client = min(captured.updates)
    model = attacker_model(captured.config, captured.shards.info.num_classes, None)[0]
    pool = public_pool(captured, client, model, rows=10**6)
    shards = captured.shards
    others = [shards.test(c) for c in range(shards.num_clients) if c != client]
    assert len(pool) == sum(len(part) for part in others)
    own = model_inputs(model, shards.train(client).images, torch.device("cpu")).flatten(1)
    assert not (torch.cdist(own, pool.flatten(1)) < 1e-6).any()
    assert len(public_pool(captured, client, model, rows=5)) == 5


def test_patches_placed_undoes_a_shuffle_of_the_tiles_and_keeps_what_no_tile_covers():
    rng = np.random.default_rng(0)
    original = rng.random((10, 9, 3))  # 2 x 2 tiles of 4 pixels; the last 2 rows and last column in no tile
    tiles = [original[r : r + 4, c : c + 4] for r in (0, 4) for c in (0, 4)]
    shuffled = rng.random((10, 9, 3))
    for (r, c), tile in zip([(0, 0), (0, 4), (4, 0), (4, 4)], [tiles[3], tiles[0], tiles[2], tiles[1]]):
        shuffled[r : r + 4, c : c + 4] = tile
    placed = scores.patches_placed(original, shuffled, 4)
    assert np.array_equal(placed[:8, :8], original[:8, :8])
    assert np.array_equal(placed[8:], shuffled[8:]) and np.array_equal(placed[:, 8:], shuffled[:, 8:])
    assert scores.psnr(original[:8, :8], shuffled[:8, :8]) < 10
