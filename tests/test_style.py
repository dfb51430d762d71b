"""The code is ruff-clean (lint and format, as configured in pyproject.toml): part of the suite, so CI checks it."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("check", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff(check):
    done = subprocess.run([sys.executable, "-m", "ruff", *check], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_shipped_presets_and_tune_spaces_keep_to_the_line_length():
    """The YAML raysim ships keeps ruff's 120 columns too: a preset's first line is its description in listings."""
    files = sorted([*ROOT.glob("raysim/config/presets/*.yaml"), *ROOT.glob("tune_spaces/*.yaml")])
    assert files
    long = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if len(line) > 120
    ]
    assert not long, f"lines over 120 characters: {long}"


def test_test_files_have_unique_names():
    """The tests folders are not packages: pytest imports each test file by its name, and a second file of the same
    name in another folder stops the whole suite's collection (a run of one folder would not show it)."""
    names = [path.name for path in ROOT.glob("tests/**/test_*.py")]
    assert len(names) > 100
    assert sorted({n for n in names if names.count(n) > 1}) == []
