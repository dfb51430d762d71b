"""The click group of raysim's commands (``raysim``, ``raysim attack``, ``raysim data``): an unknown subcommand is a
one-line error that lists the valid ones, as every unknown name in raysim is."""

from __future__ import annotations

import click

from raysim.base.errors import unknown_name


class CommandGroup(click.Group):
    """A click group whose unknown subcommand raises :func:`~raysim.base.errors.unknown_name`'s error (the CLI
    prints it on one line, exit code 2); its subgroups are of this class too."""

    group_class = type

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else None
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            raise unknown_name("command", name, self.list_commands(ctx))
        return super().resolve_command(ctx, args)
