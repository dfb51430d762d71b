"""The one proxy: calls an actor's methods and waits for them, so a handle reads like the object it stands for;
a lost actor surfaces as :class:`~raysim.base.errors.SimulationLost`, which the driver answers by restarting the
rounds from the last checkpoint, and a :class:`~raysim.base.errors.ConfigError` the actor raised as itself."""

from __future__ import annotations

import ray
from ray.exceptions import RayActorError, RayTaskError

from raysim.base.errors import ConfigError, SimulationLost, last_line


def unwrapped(ref: ray.ObjectRef | list[ray.ObjectRef]):
    """``ray.get(ref)`` (a list: its values); a :class:`~raysim.base.errors.ConfigError` the task raised (bad input
    seen where it runs: a weights file, a prompt option) is raised as itself, one line, not in Ray's traceback."""
    try:
        return ray.get(ref)
    except RayTaskError as error:
        if isinstance(error.cause, ConfigError):
            raise error.cause from None
        raise


class ActorProxy:
    """Every public method of the actor, as a blocking call."""

    def __init__(self, handle, what: str):
        self.handle, self.what = handle, what

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("handle", "what"):
            raise AttributeError(name)
        return lambda *args: self.call(name, *args)

    def call(self, name: str, *args):
        try:
            return unwrapped(getattr(self.handle, name).remote(*args))
        except RayTaskError as error:  # first: a task's error that wraps a lost actor is a RayActorError too
            if isinstance(error.cause, (RayActorError, SimulationLost)):
                raise SimulationLost(
                    f"{self.what} lost a worker or service beyond Ray's retries ({last_line(error.cause)})"
                ) from None
            raise
        except RayActorError as error:
            raise SimulationLost(f"{self.what} died ({type(error).__name__})") from None
