"""Progress of an attack's long loops (the replay's rounds, a search's iterations, an inverse network's epochs): a
transient bar on stderr, shown only inside :func:`showing_progress` (the ``raysim attack`` commands) and only when
stderr is a terminal; in a pipe, a file or a library call the loops print nothing, and the bar leaves no line
behind."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

_console: ContextVar[Console | None] = ContextVar("raysim_attack_progress", default=None)


@contextmanager
def showing_progress(console: Console | None = None) -> Iterator[None]:
    """Inside, :func:`steps` draws its bar on ``console`` (stderr by default) if that is a terminal."""
    console = console or Console(file=sys.stderr)
    token = _console.set(console if console.is_terminal else None)
    try:
        yield
    finally:
        _console.reset(token)


@contextmanager
def steps(description: str, total: int | None) -> Iterator[Callable[[], None]]:
    """A bar of ``total`` steps (None: as many as it takes) named ``description`` for as long as the block runs;
    yields the function that advances it by one (which does nothing where no bar is shown). The block should print
    nothing to stdout: the bar leaves stdout alone, so that a command's results can go to a file while the bar shows
    on the terminal."""
    console = _console.get()
    if console is None:
        yield _nothing
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True, redirect_stdout=False) as progress:
        task = progress.add_task(description, total=total)
        yield lambda: progress.advance(task)


def _nothing() -> None:
    """The step of a loop no bar is shown for."""
