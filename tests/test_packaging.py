"""The wheel ships actors/, algorithms/ and tune_spaces/ inside raysim, plus the presets; the checkout's raysim/
holds them too (links), for the processes that import raysim from the checkout rather than the install."""

import subprocess
import sys
import zipfile
from importlib.machinery import PathFinder
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
        "raysim/algorithms/fedvpt/__init__.py",
        "raysim/algorithms/fedvpt/method.py",
        "raysim/algorithms/fedprox/method.py",
        "raysim/tune_spaces/__init__.py",
        "raysim/config/presets/quick.yaml",
        "raysim/cli.py",
    ):
        assert expected in names, expected
    assert not any(name.startswith(("algorithms/", "actors/", "tests/")) for name in names)


def test_the_installed_package_imports_the_linked_subpackages():
    import raysim.actors.coordinator
    import raysim.algorithms

    assert Path(raysim.algorithms.__file__).parent.name == "algorithms"


def test_the_checkouts_raysim_folder_holds_the_whole_package():
    # Ray puts the driver's working directory first on every worker's sys.path, so a run started in the checkout
    # imports ./raysim in its workers whatever is installed (a wheel: no import hook maps the top-level folders in).
    # Python's path finder must then find raysim.actors, raysim.algorithms and raysim.tune_spaces in ./raysim: links
    # to the top-level folders. Before them, `pip install .` then `raysim run` in the checkout lost its coordinator
    # ("No module named 'raysim.actors'"); only an editable install's import hook found them.
    for sub in ("actors", "algorithms", "tune_spaces"):
        spec = PathFinder.find_spec(f"raysim.{sub}", [str(ROOT / "raysim")])
        assert spec is not None, f"raysim/{sub} is missing from the checkout's package folder"
        assert Path(spec.origin).resolve() == ROOT / sub / "__init__.py"
