"""The wheel ships actors/, algorithms/ and tune_spaces/ inside raysim, plus the presets."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_maps_top_level_folders_into_the_raysim_package(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("raysim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "raysim/actors/coordinator.py",
        "raysim/actors/client_worker.py",
        "raysim/algorithms/fedvpt.py",
        "raysim/algorithms/fedprox.py",
        "raysim/tune_spaces/__init__.py",
        "raysim/config/presets/quick.yaml",
        "raysim/cli.py",
    ):
        assert expected in names, expected
    assert not any(name.startswith(("algorithms/", "actors/", "tests/")) for name in names)


def test_installed_package_imports_the_mapped_subpackages():
    import raysim.actors.coordinator
    import raysim.algorithms

    assert Path(raysim.algorithms.__file__).parent.name == "algorithms"
