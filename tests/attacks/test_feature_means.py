"""What FedGCR's feature means reveal: the nearest public rows, the type and the label precision by hand, and the
attack on a recorded FedGCR run (its pool, its baseline, its nested MLflow run)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.algorithms._group_custom import gc_net
from raysim.attacks.capture import capture
from raysim.attacks.feature_means import most_common, nearest_rows, read_off
from raysim.attacks.harness import FEATURE_MEAN, GC_NET, read_feature_means
from raysim.attacks.prototype import nearest_type, prototypes, type_means
from raysim.attacks.recorded import recorded_config
from raysim.attacks.smashed import SmashedSettings
from raysim.cli import main
from raysim.data.shards import ClientData
from raysim.ops.contrastive import class_balanced_mean


def rows(labels, domains) -> ClientData:
    labels = np.array(labels)
    return ClientData(np.zeros((len(labels), 2, 2, 3), np.uint8), labels, np.array(domains))


def test_the_nearest_rows_by_cosine_ties_to_the_lower_index():
    public = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.1], [2.0, 0.0], [-1.0, 0.0]])
    # cosines with (1, 0): 1, 0, 0.99875, 1, -1
    assert nearest_rows(torch.tensor([1.0, 0.0]), public, 3).tolist() == [0, 3, 2]


def test_type_and_label_precision_by_hand():
    public = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [0.0, 1.0], [0.1, 0.9]])
    pool = rows(labels=[3, 4, 3, 5, 3], domains=[1, 1, 0, 0, 0])
    own = rows(labels=[3, 3, 7], domains=[1, 1, 1])
    found = read_off(9, torch.tensor([1.0, 0.05]), public, pool, 2, own, own_type=1, k=3)
    # nearest 3: rows 0, 1, 2 -> domains 1, 1, 0 (type 1); labels 3, 4, 3 -> 2 of 3 held; base rate 3 of 5
    assert found.nearest.tolist() == [0, 1, 2] and found.guessed_type == 1 and found.type_recovered
    assert found.label_precision == pytest.approx(2 / 3) and found.label_base_rate == pytest.approx(3 / 5)
    assert found.baseline_type == 2 and not found.baseline_recovered and found.pool_rows == 5
    assert most_common(np.array([4, 1, 4, 1, 0])) == 1


def test_the_type_a_prototype_shows_is_that_of_the_nearest_mean_image():
    images = np.zeros((4, 1, 1, 3))
    images[1], images[2], images[3] = 1.0, 0.5, 1.0  # type 0: rows 0 and 1 (mean 0.5); type 3: rows 2 and 3 (0.75)
    means = type_means(images, np.array([0, 0, 3, 3]))
    assert sorted(means) == [0, 3]
    np.testing.assert_allclose(means[0], 0.5)
    np.testing.assert_allclose(means[3], 0.75)
    assert nearest_type(np.full((1, 1, 3), 0.7), means) == 3
    assert nearest_type(np.full((1, 1, 3), 0.55), means) == 0
    assert nearest_type(np.full((1, 1, 3), 0.625), means) == 0  # a tie: the lower type


@pytest.fixture(scope="module")
def recorded(tracked_run):
    """A tracked two-round FedGCR run on the sequential backend."""
    return tracked_run("fedgcr", {"federation": {"rounds": 2}})


def test_each_client_is_read_against_the_rows_of_the_others_as_it_made_its_mean(recorded):
    uri, run_id = recorded
    captured = capture(recorded_config(uri, run_id), 2)
    clients = sorted(captured.updates)
    readings = read_feature_means(captured, clients, k=5)
    shards = captured.shards
    found = [r.inference for r in readings]
    assert [r.client for r in found] == clients
    assert [r.pool_rows for r in found] == [int(shards.test_sizes().sum() - len(shards.test(c))) for c in clients]
    types = shards.client_domain
    assert [r.true_type for r in found] == [int(types[c]) for c in clients]
    assert [r.baseline_type for r in found] == [int(np.bincount(np.delete(types, c)).argmax()) for c in clients]
    assert all(len(r.nearest_images) == 5 for r in readings)
    # the attacker's mapping is the client's: its sent GC-Net weights on its rows' class tokens give its h_tilde back
    update, own = captured.updates[clients[0]], shards.train(clients[0])
    h = gc_net({name: update.params[f"extra.{name}"] for name in GC_NET}, torch.tensor(np.array(own.features["cls"])))
    remade = class_balanced_mean(h, torch.tensor(own.labels).long())
    assert torch.allclose(remade, update.extras[FEATURE_MEAN], atol=1e-5)


def test_the_prototype_search_brings_its_feature_to_the_mean(recorded):
    uri, run_id = recorded
    captured = capture(recorded_config(uri, run_id), 2)
    client = min(captured.updates)
    ((start,), (searched,)) = (prototypes(captured, [client], SmashedSettings(iterations=n)) for n in (1, 40))
    assert searched.loss < 0.5 * start.loss
    assert searched.image.shape == start.image.shape and 0.0 <= searched.image.min() <= searched.image.max() <= 1.0
    types = captured.shards.client_domain
    assert searched.true_type == int(types[client]) and searched.guessed_type in searched.type_means
    assert sorted(searched.type_means) == sorted(set(np.delete(types, client).tolist()))


def test_the_attack_is_a_run_nested_under_the_attacked_one(recorded, nested_run):
    uri, run_id = recorded
    arguments = ["--run", run_id, "--tracking-uri", uri, "--round", "2", "--k", "5", "--prototype", "--iterations", "3"]
    result = CliRunner().invoke(main, ["attack", "features", *arguments])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("features, round 2,")
    attack_run = nested_run(uri, run_id, result.output)
    metrics, client = attack_run.data.metrics, MlflowClient(tracking_uri=uri)

    def per_client(key):  # logged at each client's id as its step
        return [m.value for m in client.get_metric_history(attack_run.info.run_id, key)]

    clients = len(attack_run.data.params["clients"].split(","))
    for summary, key in (
        ("type_accuracy", "type_recovered"),
        ("label_base_rate_mean", "label_base_rate"),
        ("prototype_type_accuracy", "prototype_type_recovered"),
    ):
        assert len(per_client(key)) == clients and metrics[summary] == pytest.approx(np.mean(per_client(key)))
    assert "the prototype shows it for" in result.output
    pictures = [a.path for a in client.list_artifacts(attack_run.info.run_id)]
    assert any(p.startswith("prototype-client-") for p in pictures) and any(p.startswith("client-") for p in pictures)
