"""The MLflow layer under concurrent runs: two runs starting at once on the same data set (a comparison's cells) both
end up linked to one data-set row, whichever of them inserts it first."""

from __future__ import annotations

from mlflow.entities import Dataset, DatasetInput
from sqlalchemy import event

from raysim.tracking.mlflow import Tracker


def test_a_run_that_loses_the_race_to_add_its_data_set_links_to_the_winner_s(tmp_path):
    """MLflow's SQL store looks a data set up, then inserts it. Here a second run adds the same data set in between
    (the SQL listener runs it just before the first run's insert), as a concurrent comparison cell did: the first
    run's insert breaks the unique key, and it must still end linked to the one row."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    dataset = DatasetInput(Dataset(name="glyphs62", digest="0123abcd", source_type="code", source="raysim"))
    slow, fast = Tracker(uri), Tracker(uri)
    for tracker in (slow, fast):
        tracker.start("race", "run", {}, {})
    engine = slow.client._tracking_client.store.engine
    raced = []

    def fast_run_inserts_first(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO DATASETS") and not raced:
            raced.append(statement)
            fast.log_dataset(dataset)

    event.listen(engine, "before_cursor_execute", fast_run_inserts_first)
    try:
        slow.log_dataset(dataset)
    finally:
        event.remove(engine, "before_cursor_execute", fast_run_inserts_first)
    assert raced  # the interleaving happened: without the retry, slow.log_dataset raised
    for tracker in (slow, fast):
        (linked,) = tracker.client.get_run(tracker.run_id).inputs.dataset_inputs
        assert (linked.dataset.name, linked.dataset.digest) == ("glyphs62", "0123abcd")
