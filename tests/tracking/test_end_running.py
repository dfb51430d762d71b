"""Ending what a stopped sweep or comparison left behind (:func:`end_running`): its runs still RUNNING, and those
that failed on their way out after the stop, end KILLED; a run that failed before the stop stays FAILED. Searches
follow every page (:func:`every_run`)."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from raysim.tracking.mlflow import end_running, every_run

STOP_MS = 1_800_000_000_000  # the stop's moment (epoch ms)


def test_runs_still_running_or_failed_after_the_stop_end_killed_the_rest_keep_their_status(tracking_uri):
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("sweep")

    def run(name: str, tags: dict, status: str | None = None, ended_ms: int | None = None) -> str:
        run_id = client.create_run(experiment, run_name=name, tags=tags).info.run_id
        if status is not None:
            client.set_terminated(run_id, status=status, end_time=ended_ms)
        return run_id

    mine = {"raysim.sweep": "s"}
    ids = {
        "running": run("running", mine),
        "failed before the stop": run("failed before", mine, "FAILED", STOP_MS - 1),
        "failed at the stop": run("failed at", mine, "FAILED", STOP_MS),
        "failed after the stop": run("failed after", mine, "FAILED", STOP_MS + 900),
        "finished after the stop": run("finished after", mine, "FINISHED", STOP_MS + 900),
        "another sweep's, running": run("other", {"raysim.sweep": "t"}),
        "its own run": run("own", mine),
    }
    end_running(tracking_uri, "sweep", "raysim.sweep", "s", own_run=ids["its own run"], failed_since=STOP_MS / 1000)

    statuses = {name: client.get_run(run_id).info.status for name, run_id in ids.items()}
    assert statuses == {
        "running": "KILLED",
        "failed before the stop": "FAILED",
        "failed at the stop": "KILLED",
        "failed after the stop": "KILLED",
        "finished after the stop": "FINISHED",
        "another sweep's, running": "RUNNING",
        "its own run": "RUNNING",
    }


def test_without_a_stop_moment_only_running_runs_end_killed(tracking_uri):
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("sweep")
    running = client.create_run(experiment, tags={"raysim.sweep": "s"}).info.run_id
    failed = client.create_run(experiment, tags={"raysim.sweep": "s"}).info.run_id
    client.set_terminated(failed, status="FAILED")
    end_running(tracking_uri, "sweep", "raysim.sweep", "s")
    assert [client.get_run(r).info.status for r in (running, failed)] == ["KILLED", "FAILED"]


def test_an_experiment_not_in_the_store_leaves_nothing_to_end(tracking_uri):
    end_running(tracking_uri, "never-created", "raysim.sweep", "s", failed_since=0.0)
    assert MlflowClient(tracking_uri).get_experiment_by_name("never-created") is None


def test_every_run_follows_the_pages_of_a_search(tracking_uri):
    """A search returns one page (at most 1,000 runs); the runs past it are found too, each once."""
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("sweep")
    ids = {client.create_run(experiment, tags={"raysim.sweep": "s"}).info.run_id for _ in range(5)}
    client.create_run(experiment, tags={"raysim.sweep": "t"})
    found = [run.info.run_id for run in every_run(client, experiment, "tags.`raysim.sweep` = 's'", page_size=2)]
    assert len(found) == 5 and set(found) == ids


def test_a_name_with_a_quote_ends_its_own_runs(tracking_uri):
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("bob's")
    mine = client.create_run(experiment, tags={"raysim.compare": "bob's"}).info.run_id
    other = client.create_run(experiment, tags={"raysim.compare": "bob"}).info.run_id
    end_running(tracking_uri, "bob's", "raysim.compare", "bob's", failed_since=STOP_MS / 1000)
    assert (client.get_run(mine).info.status, client.get_run(other).info.status) == ("KILLED", "RUNNING")
