"""The MLflow layer under concurrent runs: runs starting at once in one new experiment, on the same data set (a
comparison's cells, runs launched together), end up in one experiment and linked to one data-set row, whichever of
them inserts the row first."""

from __future__ import annotations

import pytest
from mlflow.entities import Dataset, DatasetInput
from sqlalchemy import event

from raysim.tracking.mlflow import Tracker

DATASET = DatasetInput(Dataset(name="glyphs62", digest="0123abcd", source_type="code", source="raysim"))


def losing_the_race(slow: Tracker, table: str, faster_run_adds_it, slow_run_adds_it):
    """Runs ``slow_run_adds_it()`` with ``faster_run_adds_it()`` slipped in just before slow's ``INSERT INTO table``
    (after MLflow's look-up found nothing): the interleaving of two concurrent runs, made deterministic."""
    engine = slow.client._tracking_client.store.engine
    raced = []

    def faster_run_inserts_first(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(f"INSERT INTO {table.upper()} ") and not raced:
            raced.append(statement)
            faster_run_adds_it()

    event.listen(engine, "before_cursor_execute", faster_run_inserts_first)
    try:
        result = slow_run_adds_it()
    finally:
        event.remove(engine, "before_cursor_execute", faster_run_inserts_first)
    assert raced  # the interleaving happened: without looking up again, slow's insert raised
    return result


@pytest.fixture
def two_runs(tracking_uri):
    return Tracker(tracking_uri), Tracker(tracking_uri)


def test_a_run_that_loses_the_race_to_add_its_data_set_links_to_the_winner_s(two_runs):
    slow, fast = two_runs
    for tracker in (slow, fast):
        tracker.start("race", "run", {}, {})
    losing_the_race(slow, "datasets", lambda: fast.log_dataset(DATASET), lambda: slow.log_dataset(DATASET))
    for tracker in (slow, fast):
        (linked,) = tracker.client.get_run(tracker.run_id).inputs.dataset_inputs
        assert (linked.dataset.name, linked.dataset.digest) == ("glyphs62", "0123abcd")


def test_a_run_that_loses_the_race_to_create_its_experiment_joins_the_winner_s(two_runs):
    slow, fast = two_runs
    created = []
    joined = losing_the_race(
        slow, "experiments", lambda: created.append(fast.experiment_id("race")), lambda: slow.experiment_id("race")
    )
    assert joined == created[0]
    assert [e.name for e in slow.client.search_experiments()].count("race") == 1
