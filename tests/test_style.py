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
