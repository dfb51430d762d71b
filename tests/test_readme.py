"""README's promise: exactly two set-up commands, CI runs the second one verbatim, and every ``raysim`` command the
README and the documentation show is one the command line takes (a ``raysim run METHOD`` one builds its config)."""

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from pymdownx.slugs import slugify

from raysim.cli import flag_layers, main
from raysim.config import build_config, load_preset, own_setting, preset_for_method

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "cluster" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"(?:^|&&\s*|\s--\s+)(raysim\s.*?)(?:\s+#.*)?$")  # a command, after && or --, no comment


def setup_commands() -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for every ``raysim ...`` line of a ``bash`` block (continued lines joined)."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if match := COMMAND.search(line.strip()):
                    found.append((str(page.relative_to(ROOT)), match.group(1)))
    return found


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    run_command, test_command = setup_commands()
    assert "raysim run" in run_command and "constraints.txt" in run_command
    assert "pytest" in test_command and "constraints.txt" in test_command
    ci_lines = [
        line
        for line in ROOT.joinpath(".ci", "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci_lines == [test_command]


def test_the_readme_shows_a_tour_and_a_method_table_within_200_lines():
    readme = ROOT.joinpath("README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert sum(1 for page, _ in shown_commands() if page == "README.md") >= 10


@pytest.mark.parametrize("page, command", shown_commands(), ids=lambda value: value)
def test_every_raysim_command_shown_parses(page, command):
    """Its subcommand, options and their values are ones the command line takes; ``raysim run METHOD`` also builds
    its config (flags, --set keys and values, preset) as the command does before it starts anything."""
    _, name, *rest = shlex.split(command)
    parent = main.make_context("raysim", [name])  # the group's settings (-h, --help), as a real invocation has
    sub = main.get_command(parent, name)
    assert sub is not None, f"{page}: raysim has no command {name!r}"
    params = sub.make_context(name, [arg for arg in rest if arg not in ("-h", "--help")], parent=parent).params
    if name == "run" and params["method"] and not params["resume"]:
        method, preset = params["method"], params["preset"]
        given = flag_layers(params["overrides"], params)
        setting = own_setting([method], preset, given)
        layers = ([preset_for_method(load_preset(preset or setting), method)] if preset or setting else []) + given
        build_config(method, layers)


def test_the_readmes_links_lead_to_pages_and_their_headings():
    """The README is read on a forge, outside the site's strict build: its links are checked here."""
    slug = slugify(case="lower")
    for target, anchor in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#([^)]+))?\)", ROOT.joinpath("README.md").read_text()):
        assert (ROOT / target).is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(), flags=re.M)
            assert anchor in {slug(re.sub(r"[`*]", "", heading), "-") for heading in headings}, f"{target}#{anchor}"


def test_the_mlflow_ui_page_shows_raysim_ui_help_as_it_is():
    shown = CliRunner().invoke(main, ["ui", "--help"], terminal_width=80, prog_name="raysim").output.rstrip()
    page = ROOT.joinpath("docs", "getting-started", "mlflow-ui.md").read_text()
    assert f"```text\n$ raysim ui --help\n{shown}\n```" in page
