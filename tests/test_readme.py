"""README's promise: exactly two set-up commands, and CI runs the second one verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


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


def test_readme_shows_raysim_ui_help_as_it_is():
    from click.testing import CliRunner

    from raysim.cli import main

    shown = CliRunner().invoke(main, ["ui", "--help"], terminal_width=80, prog_name="raysim").output.rstrip()
    assert f"```text\n$ raysim ui --help\n{shown}\n```" in ROOT.joinpath("README.md").read_text()
