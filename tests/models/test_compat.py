"""The torchvision shim, checked in fresh interpreters so this process's imports do not interfere."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_python(code):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def imported():
    """A fresh interpreter that imports raysim.models, then timm and torchvision, and reports the shim."""
    return run_python(
        "import raysim.models, timm, torchvision; from raysim.models._compat import shim_applied; print(shim_applied())"
    )


def test_raysim_models_then_timm_and_torchvision_import(imported):
    assert imported.returncode == 0, imported.stderr


def test_shim_applied_exactly_when_plain_torchvision_import_fails(imported):
    plain_import_fails = run_python("import torchvision").returncode != 0
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == str(plain_import_fails)
