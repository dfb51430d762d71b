"""raysim's click plumbing: the group of its commands (``raysim``, ``raysim attack``, ``raysim data``), whose unknown
subcommand is a one-line error that lists the valid ones, as every unknown name in raysim is, and the options a
command was given on its command line."""

from __future__ import annotations

import click
from click.core import ParameterSource

from raysim.base.errors import unknown_name


def given_on_command_line(names: tuple[str, ...]) -> list[str]:
    """The flags (``--num-samples``) of the current command's parameters ``names`` (``num_samples``) that its command
    line gave, not their defaults."""
    context = click.get_current_context()
    return [
        f"--{name.replace('_', '-')}"
        for name in names
        if context.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]


class CommandGroup(click.Group):
    """A click group whose unknown subcommand raises :func:`~raysim.base.errors.unknown_name`'s error (the CLI
    prints it on one line, exit code 2); its subgroups are of this class too."""

    group_class = type

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else None
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            raise unknown_name("command", name, self.list_commands(ctx))
        return super().resolve_command(ctx, args)
