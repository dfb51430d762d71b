"""The one error type users see: a one-line message that says what is wrong and how to fix it."""


class ConfigError(ValueError):
    """Bad input from the user (config, CLI, files). The CLI prints it on one line and exits with 2."""


class BadUpdateError(RuntimeError):
    """A client sent NaN/Inf or tensors of the wrong shape and ``federation.bad_updates`` is "fail"; the run
    ends FAILED and the CLI prints this on one line (exit code 1: the input was valid, the run was not)."""


def unknown_name(kind: str, name: str, valid) -> ConfigError:
    """An error for a name that is not registered, listing the valid ones."""
    return ConfigError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid))}")


def first_line(error: BaseException) -> str:
    """The first non-empty line of ``error``'s message ("" where it has none)."""
    return (str(error).strip().splitlines() or [""])[0]


def last_line(error: BaseException, limit: int = 300) -> str:
    """``error``'s type and the last non-empty line of its message, clipped, for a one-line message (Ray's and
    Tune's errors carry their cause last)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1][:limit]}" if lines else type(error).__name__


class SweepError(RuntimeError):
    """A sweep ended without a trial that can be reproduced (every trial failed or stopped early); the CLI prints
    it on one line with exit code 1."""


class SimulationLost(RuntimeError):
    """The process running the round loop (the Ray ``Coordinator``, or a worker beyond Ray's task retries) died;
    the driver restarts the loop from the last checkpoint."""


class RecoveriesExhausted(SimulationLost):
    """One round lost its process more times in a row than the driver restarts it; ``resumable``: whether a
    checkpoint of the run was written (the CLI prints the message, exit code 1)."""

    def __init__(self, message: str, resumable: bool):
        super().__init__(message)
        self.resumable = resumable


class RunInterrupted(RuntimeError):
    """The run stopped after a round at the user's Ctrl-C (or a SIGTERM: ``signum``), with a checkpoint written; the
    message says how to resume. The CLI prints it and exits with 128 + ``signum`` (130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, message: str, signum: int = 2, ray_lost: bool = False):
        super().__init__(message)
        self.signum = signum
        self.ray_lost = ray_lost  # Ray's own processes went down with the signal: nothing to shut down


class Terminated(KeyboardInterrupt):
    """A SIGTERM (a scheduler's time limit, ``timeout``, Kubernetes) that stops the command at once; handled as a
    second Ctrl-C is, but the CLI exits with 143 (:mod:`raysim.base.stop_signals`)."""
