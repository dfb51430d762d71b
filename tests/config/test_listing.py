"""Settings that explain themselves: every config key and every method option declares its help, and ``raysim ls
options METHOD`` prints a method's options from those declarations (``--names``: one key a line)."""

from __future__ import annotations

from dataclasses import fields

import pytest
from click.testing import CliRunner

from raysim.base.settings import described
from raysim.cli import main
from raysim.config import SECTIONS, build_config
from raysim.config.listing import option_names, options_text, shown
from raysim.core.registry import METHODS, get_method


def ls(*args):
    return CliRunner().invoke(main, ["ls", *args])


@pytest.mark.parametrize(
    "owner, cls",
    [*SECTIONS.items(), *((name, info.options) for name, info in METHODS.items())],
    ids=[*SECTIONS, *METHODS],
)
def test_every_config_key_and_method_option_has_help(owner, cls):
    """A key without help (a plain ``name: int = 3``, not ``setting(...)``) fails here, and the reference pages and
    ``raysim ls options`` would show it bare."""
    bare = [spec.name for spec in fields(cls) if not spec.metadata.get("help", "").strip()]
    assert not bare, f"{owner}: {', '.join(bare)} declared without help; declare them with setting(default, help)"


def test_ls_options_prints_every_option_with_its_type_default_values_and_help():
    result = ls("options", "sgpt")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("sgpt's options (--set sgpt.KEY=VALUE):\n")
    for entry in described(get_method("sgpt").options):
        assert f"sgpt.{entry['name']}" in result.output
        assert " ".join(entry["help"].split()[:3]) in result.output
    assert "sgpt.groups                        int, default 10; must be at least 1\n" in result.output
    assert "sgpt.bcd                           str, default bcd; one of joint, bcd, bcd-inv\n" in result.output
    assert "sgpt.shared_blocks                 list, default []\n" in result.output


def test_ls_options_names_are_keys_that_set_accepts():
    """``--names`` gives the keys as ``--set`` takes them, under the method's section (fgpt-u's is fgpt)."""
    result = ls("options", "fgpt-u", "--names")
    assert result.exit_code == 0
    assert result.output.split() == option_names("fgpt-u") and "fgpt.k" in result.output.split()
    for key in option_names("fgpt-u"):
        section, name = key.split(".")
        default = getattr(get_method("fgpt-u").options(), name)
        build_config("fgpt-u", [{section: {name: default}}])  # every listed key is one build_config takes


def test_a_method_without_options_says_so():
    result = ls("options", "fedavg")
    assert result.exit_code == 0 and result.output.startswith("fedavg has no options of its own")
    assert ls("options", "fedavg", "--names").output == "\n"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["options", "sgtp"], "unknown method 'sgtp'; valid methods: afl, ditto,"),
        (["options"], "raysim ls options METHOD lists a method's options; METHOD: afl, ditto, fed-dualprompt, "),
        (["methods", "sgpt"], "raysim ls methods takes no METHOD ('sgpt'); raysim ls options sgpt lists its options"),
        (["methods", "extra"], "raysim ls methods takes no METHOD ('extra'); drop it"),
    ],
)
def test_bad_ls_options_are_one_line_exit_2(args, fragment):
    result = ls(*args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("raysim: error: ") and fragment in result.stderr


def test_run_help_says_how_to_see_a_methods_options():
    assert "raysim ls options METHOD" in " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())


def test_defaults_are_shown_as_set_takes_them():
    assert [shown(v) for v in (None, True, (), (1, 2), 0.5, "cls")] == ["null", "true", "[]", "[1, 2]", "0.5", "cls"]
    assert "true" in options_text("fedpr") and "normalise" in options_text("fedpr")
