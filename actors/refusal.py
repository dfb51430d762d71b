"""``RefusesInOneLine``: an actor whose constructor meets bad input (a weights file its node cannot read, a prompt
option) keeps the :class:`~raysim.core.errors.ConfigError` and raises it from :meth:`ready`, its first call. Raised
by the constructor, it would kill the actor: the caller would see the actor's death and Ray's creation traceback,
not the one line (:class:`~raysim.actors.proxy.ActorProxy` and the set-up raise a task's ``ConfigError`` as
itself)."""

from __future__ import annotations

from raysim.core.errors import ConfigError


class RefusesInOneLine:
    """Mixin, first among the bases of an actor class whose other base has ``ready()``."""

    def __init__(self, *args, **kwargs):
        self._refused = None
        try:
            super().__init__(*args, **kwargs)
        except ConfigError as error:
            self._refused = error

    def ready(self) -> bool:
        """The other base's ``ready()``; raises what refused the construction."""
        if self._refused is not None:
            raise self._refused
        return super().ready()
