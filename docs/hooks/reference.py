"""MkDocs hook: the reference pages generated from the code's declarations at build time, never written by hand.

``reference/cli.md`` is every command's ``--help`` (click); ``reference/config.md`` every config key of every section
and ``reference/options.md`` every method's options, each with its type, default, accepted values and help, as
:func:`raysim.base.settings.setting` declares them (what ``raysim ls options METHOD`` prints); ``reference/privacy.md``
what each privacy setting covers of each method's channels (:mod:`raysim.privacy.channels`); ``reference/api.md``
every name ``raysim`` exports (``raysim.__all__``), rendered from its docstring and signature by mkdocstrings.
"""

from __future__ import annotations

import html
import re

from click.testing import CliRunner
from mkdocs.structure.files import File

import raysim
from raysim.base.settings import described
from raysim.cli import main
from raysim.config import SECTIONS
from raysim.config.listing import accepts, shown
from raysim.core.registry import FAMILIES, METHODS
from raysim.privacy.channels import REFUSED, outcomes


def cell(text: str) -> str:
    """Text that stays inside one cell of a Markdown table."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def table(section: str, entries: list[dict]) -> list[str]:
    rows = ["| key | type | default | what it is |", "|---|---|---|---|"]
    for entry in entries:
        flag = f" Flag: `{entry['flag']}`." if entry["flag"] else ""
        rule = accepts(entry)
        what = entry["help"] + (f" {rule[0].upper()}{rule[1:]}." if rule else "") + flag
        default = shown(entry["default"])
        rows.append(f"| `{section}.{entry['name']}` | {entry['type']} | `{cell(default)}` | {cell(what)} |")
    return rows


def config_page() -> str:
    lines = [
        "# Config keys",
        "",
        "Every key of a run's config, by section, generated from its declaration. `--set SECTION.KEY=VALUE` sets "
        "any of them, a preset file under `SECTION:` (e.g. `federation: {rounds: 10}`), and a key with a flag also "
        "has that `raysim run` option. A method's own options are on [Method options](options.md).",
    ]
    for section, cls in SECTIONS.items():
        doc = " ".join((cls.__doc__ or "").split())
        lines += ["", f"## {section}", "", cell(doc), "", *table(section, described(cls))]
    return "\n".join(lines) + "\n"


def options_page() -> str:
    by_section: dict[str, list[str]] = {}
    for name, info in METHODS.items():
        by_section.setdefault(info.options_key, []).append(name)
    bare = [name for name, info in METHODS.items() if not described(info.options)]
    lines = [
        "# Method options",
        "",
        "Every method's options, generated from their declarations; `raysim ls options METHOD` prints the same. Set "
        "one with `--set SECTION.KEY=VALUE` (the section is the method's, or the one it shares: `fgpt-u` reads "
        "`fgpt`), under `SECTION:` in a preset, or as `METHOD:KEY=VALUE` in `raysim compare`. Methods without "
        f"options of their own: {', '.join(f'`{name}`' for name in bare)}.",
    ]
    for family in FAMILIES:
        for section, names in sorted(by_section.items()):
            info = METHODS.get(names[0])
            entries = described(info.options)
            if info.family != family or not entries:
                continue
            doc = " ".join((info.options.__doc__ or "").split())
            used = ", ".join(f"`{name}`" for name in names)
            lines += ["", f"## {section}", "", f"Used by {used} ({family}). {doc}", "", *table(section, entries)]
    return "\n".join(lines) + "\n"


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "Every `raysim` command's `--help`, generated from the command line itself. Bad input ends in one line on "
        "stderr (`raysim: error: ...`) and exit code 2.",
        "",
        "Tab completion of commands, options, method names and presets (click's): add "
        '`eval "$(_RAYSIM_COMPLETE=bash_source raysim)"` to `~/.bashrc`, or '
        '`eval "$(_RAYSIM_COMPLETE=zsh_source raysim)"` to `~/.zshrc`; for fish, '
        "`_RAYSIM_COMPLETE=fish_source raysim > ~/.config/fish/completions/raysim.fish`.",
    ]
    commands = [[]]
    for name, command in main.commands.items():  # a group's subcommands after it (raysim data fetch)
        commands += [[name], *([name, sub] for sub in getattr(command, "commands", {}))]
    for path in commands:
        shown_help = CliRunner().invoke(main, [*path, "--help"], prog_name="raysim", terminal_width=100).output
        lines += ["", f"## raysim {' '.join(path)}".rstrip(), "", "```text", shown_help.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def privacy_page() -> str:
    """Per method and privacy setting, what its clients send and whether the setting covers it
    (:func:`raysim.privacy.channels.outcomes`): the run refuses where a channel is not covered."""
    settings = {
        "user-level DP": ("user", False),
        "record-level DP": ("record", False),
        "secure aggregation": ("none", True),
    }
    lines = [
        "# Privacy coverage",
        "",
        "For every method and privacy setting ([Privacy](../how-to/privacy.md)), generated from the methods' "
        "declarations: each channel its clients send is privatised, or the run refuses to start with the line shown.",
        "",
        f"| method | channels | {' | '.join(settings)} |",
        "|---|---|" + "---|" * len(settings),
    ]
    for name in METHODS:
        found = {label: outcomes(name, *setting) for label, setting in settings.items()}
        channels = ", ".join(f"`{c}`" for c in next(iter(found.values())))
        cells = []
        for outcome in found.values():
            refused = [line for state, line in outcome.values() if state == REFUSED]
            cells.append(cell("refused: " + refused[0].split(": ", 1)[1]) if refused else "covered")
        lines.append(f"| `{name}` | {channels} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


API_GROUPS = {  # every name raysim exports, once; a name added to raysim.__all__ and not here fails the build
    "Running an experiment": ("build_config", "Config", "run", "Callback", "get_method", "ConfigError"),
    "Writing a method": ("register", "Method", "FedAvg", "ModelParts", "ClientContext"),
    "What a method adds by mixing in": (
        "CachesRowFeatures",
        "SendsExtras",
        "Personalised",
        "SplitLearning",
        "Diagnostics",
        "ResolvesOptions",
    ),
    "Messages": ("GlobalState", "Broadcast", "ClientUpdate"),
}


def api_page() -> str:
    listed = [name for names in API_GROUPS.values() for name in names]
    if sorted(listed) != sorted(raysim.__all__):
        missing, extra = set(raysim.__all__) - set(listed), set(listed) - set(raysim.__all__)
        raise ValueError(f"docs/hooks/reference.py API_GROUPS: add {sorted(missing)}, remove {sorted(extra)}")
    lines = [
        "# Python API",
        "",
        "What a script, a notebook or a method's own module imports: `from raysim import run, build_config, Method, "
        "register`, and the rest below, each from its docstring and signature. [Adding a method](../how-to/"
        "add-method.md) shows them at work; the command line is on [Command line](cli.md).",
    ]
    for group, names in API_GROUPS.items():
        lines += ["", f"## {group}"]
        lines += [f"\n::: {raysim._EXPORTS[name]}.{name}" for name in names]
    return "\n".join(lines) + "\n"


PAGES = {
    "reference/config.md": config_page,
    "reference/options.md": options_page,
    "reference/cli.md": cli_page,
    "reference/privacy.md": privacy_page,
    "reference/api.md": api_page,
}


# a Sphinx cross-reference role as the API page renders it from a docstring: :func:`x` becomes :func:<code>x</code>
SPHINX_ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj):<code>(~?)([^<]*)</code>")


def on_page_content(html_text, page, config, files):
    """On the API page, the docstrings' Sphinx roles shown as the code they name: the role dropped, and a path
    marked ``~`` shortened to its last part, as Sphinx shows it."""
    if page.file.src_uri != "reference/api.md":
        return html_text
    return SPHINX_ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html_text)


def on_files(files, config):
    """Add the generated pages to the site (they exist only in the build)."""
    for path, page in PAGES.items():
        files.append(File.generated(config, path, content=page()))
    return files
