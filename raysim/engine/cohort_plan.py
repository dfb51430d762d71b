"""Which clients train together: ``train.cohort`` made concrete and a round's tasks cut into cohorts
(:mod:`raysim.engine.cohort` trains them). Imports no torch: the driver resolves ``train.cohort`` with it."""

from __future__ import annotations

from raysim.core.registry import get_method


def resolve_cohort(train, resources) -> str:
    """``train.cohort=auto`` made concrete: "on" where clients train on a GPU, else "off". On 2 CPU cores a
    ViT-Tiny client's batch already fills the cores: 8 clients in one cohort trained 65 samples/s against 89 one at
    a time, with 2.7x the memory (``bench/scale.py`` at 100 x 200: the worker's PSS 2,058 MB against 766 MB)."""
    if train.cohort != "auto":
        return train.cohort
    return "on" if resources.gpus_per_client > 0 else "off"


def cohort_training(config) -> bool:
    """Whether the run trains a worker's clients in cohorts: the method supports it, ``train.cohort`` resolves on, and
    no record-level DP clips each row's gradient."""
    on = resolve_cohort(config.train, config.resources) == "on" and config.privacy.mode != "record"
    return on and get_method(config.method).cohort


def cohorts_of(tasks: list, config) -> list[list]:
    """The round's tasks in cohorts of ``train.cohort_size`` (in order; one client each when the run does not train
    in cohorts): a function of the round alone, so every backend and pool size trains the same cohorts."""
    size = config.train.cohort_size if cohort_training(config) else 1
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]
