"""Guard rails on the package's shape: no import cycle among raysim's modules, and each layer imports only what it
may (the method files and the pure math never reach for Ray or the engine); the CLI starts without torch, Ray or
MLflow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"raysim": "raysim", "actors": "raysim.actors", "algorithms": "raysim.algorithms"}


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the distribution."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The raysim modules ``path`` imports anywhere in its code: at the top, inside functions and in
    ``if TYPE_CHECKING:`` blocks (an annotation's import is a dependency too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{alias.name}" for alias in node.names]  # a submodule, or a name defined in base
            targets = [n if n in known else base for n in names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != "raysim":
                out.add(target)
    return out


GRAPH = {name: imports_of(path, name, set(modules())) for name, path in modules().items()}


def test_no_import_cycles():
    """Depth-first search over the import graph; a cycle is reported with its modules in order."""
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == "open":
                cycle = trail[trail.index(nxt) :] + [nxt] if nxt in trail else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


RAY_OR_ENGINE = ("ray", "raysim.engine", "raysim.actors", "raysim.sweep", "raysim.cli")


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


# docs/architecture.md's layers, lowest first: a module imports only from its own layer and those before it
LAYERS = (
    ("raysim.base",),  # nothing of raysim's but each other: every layer may use them
    ("raysim.ops",),
    ("raysim.systems",),
    ("raysim.data",),
    ("raysim.models",),
    ("raysim.core",),  # the protocol, messages, training loops, the methods' registry
    ("raysim.privacy",),  # channels, mechanisms, accounting: what the config checks and the engine applies
    ("raysim.config",),
    ("raysim.tracking",),
    ("raysim.algorithms",),
    ("raysim.engine", "raysim.actors"),
    ("raysim.testing",),
    ("raysim.sweep",),
    ("raysim.attacks",),  # replays runs and attacks what their servers received
    ("raysim.cli", "raysim"),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix that names ``module``."""
    return max((len(p), index) for index, prefixes in enumerate(LAYERS) for p in prefixes if within(module, [p]))[1]


def test_each_layer_imports_only_its_own_and_those_before_it():
    offenders = {name: sorted(t for t in targets if layer_of(t) > layer_of(name)) for name, targets in GRAPH.items()}
    assert not {name: above for name, above in offenders.items() if above}


def third_party(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add(node.module or "")
    return out


@pytest.mark.parametrize("layer", ["raysim.algorithms", "raysim.ops", "raysim.core"])
def test_methods_math_and_protocol_never_import_ray_or_the_engine(layer):
    offenders = {
        name: sorted(m for m in third_party(path) if within(m, RAY_OR_ENGINE))
        for name, path in modules().items()
        if within(name, [layer])
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_the_pure_math_imports_no_model_data_or_tracking_code():
    for name, targets in GRAPH.items():
        if within(name, ["raysim.ops"]):
            assert all(within(t, ["raysim.ops", "raysim.base.errors"]) for t in targets), (name, targets)


def test_tracking_never_imports_the_engine():
    for name, targets in GRAPH.items():
        if within(name, ["raysim.tracking"]):
            assert not any(within(t, ["raysim.engine", "raysim.actors"]) for t in targets), (name, targets)


def heavy_imports(code: str, heavy: tuple[str, ...]) -> str:
    """Which of ``heavy`` a fresh interpreter has imported after running ``code`` (printed as a sorted list)."""
    probe = f"import sys\n{code}\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_the_cli_starts_without_torch_ray_or_mlflow():
    """``raysim --help``, ``raysim ls datasets|presets`` and flag errors answer in a fraction of a second: the
    heavy libraries are imported by the command that needs them (a run, a method's registration), not by the CLI."""
    assert heavy_imports("import raysim.cli", ("torch", "timm", "torchvision", "sklearn", "ray", "mlflow")) == "[]"


def test_the_worker_and_coordinator_import_no_tracking_clustering_or_model_libraries():
    """A client worker and the coordinator are torch processes, one per worker: scikit-learn with SciPy, matplotlib,
    pandas and MLflow cost each about 140 MB of PSS and 1.5 s of start-up (measured on 2 cores); timm with
    torchvision and torch._dynamo 110 MB and 2 s. They are imported where they are used (FedGCR's clustering, the
    driver's plots and tracking, a trace file, building a model), not by looking up a method or a module a worker's
    handle names (tests/engine/test_executors.py checks the coordinator after a round)."""
    code = (
        "import raysim.engine.client, raysim.engine.simulation\n"  # what a worker and the coordinator load
        "from raysim.core.registry import METHODS, get_method\n"
        "[get_method(name) for name in METHODS]"
    )
    heavy = ("sklearn", "scipy", "matplotlib", "pandas", "mlflow", "timm", "torchvision", "torch._dynamo")
    assert heavy_imports(code, heavy) == "[]"


def test_the_driver_of_a_ray_run_imports_no_torch():
    """A Ray run's model is built by its first worker (``ClientWorker.model_setup``) and its state lives in the
    coordinator, so its driver, like a sweep's or a comparison's, imports neither timm with torchvision and
    torch._dynamo (110 MB of PSS, 2 s) nor torch itself (136 MB, 0.9 s): the actors' modules load the engine in
    their own processes (tests/e2e/test_cli.py checks a whole run's driver)."""
    code = "import raysim.engine.driver, raysim.engine.setup, raysim.sweep.tune, raysim.sweep.compare"
    heavy = ("torch", "safetensors.torch", "timm", "torchvision", "raysim.models")
    assert heavy_imports(code, heavy) == "[]"


def test_the_config_is_built_without_torch():
    """``raysim run`` builds its config, and refuses a mistake in it, before Ray starts: the methods' declarations
    (``algorithms/NAME/__init__.py``) import no torch (1.5-2 s on 2 cores), which loads with a method's class
    (``algorithms/NAME/method.py``) when the run needs it, while Ray starts."""
    code = (
        "from raysim.config import build_config\n"
        "from raysim.core.registry import METHODS\n"
        "[build_config(m, []) for m in METHODS]"
    )
    classes = tuple(
        f"raysim.algorithms.{path.parent.name}.method" for path in (ROOT / "algorithms").glob("*/method.py")
    )
    assert len(classes) > 20
    assert heavy_imports(code, ("torch", "timm", "ray", "mlflow", *classes)) == "[]"


def test_a_methods_declaration_imports_only_settings_the_registry_and_other_declarations():
    """What the config is built from stays torch-free by construction, not by luck: a method package's
    ``__init__.py`` reaches only ``raysim.base``, the registry and other declarations (``_declarations`` included)."""
    declarations = {
        n for n, path in modules().items() if within(n, ["raysim.algorithms"]) and path.name == "__init__.py"
    }
    allowed = declarations | {"raysim.algorithms._declarations", "raysim.core.registry"}
    for name in declarations:
        assert all(within(t, ["raysim.base"]) or t in allowed for t in GRAPH[name]), (name, GRAPH[name])
        outside = {m for m in third_party(modules()[name]) if not within(m, ["raysim"])}
        assert outside <= {"__future__", "dataclasses", "importlib", "pkgutil", "collections.abc"}, (name, outside)


def test_ray_starts_before_the_driver_is_imported():
    """``raysim run`` starts Ray on its thread while another imports the driver (torch, MLflow, matplotlib: 3-5 s on
    2 cores, ``cli.driver_and_data``): the module that starts Ray imports none of them."""
    heavy = ("torch", "mlflow", "matplotlib", "pandas", "raysim.engine.driver")
    assert heavy_imports("import raysim.engine.ray_connect", heavy) == "[]"


DRIVER_IMPORTED_ON = """
import builtins, sys, threading, time
from raysim.base.errors import ConfigError
from raysim.engine import ray_connect

seen, real_import = {}, builtins.__import__
def watching(name, *args, **kwargs):
    if name == "raysim.engine.driver" and "thread" not in seen:
        seen["thread"] = threading.current_thread().name
    return real_import(name, *args, **kwargs)
builtins.__import__ = watching

def connect_ray(resources):  # Ray's start, stood in for: waits for the driver's import, then refuses
    for _ in range(1200):
        if hasattr(sys.modules.get("raysim.engine.driver"), "run"):
            break
        time.sleep(0.05)
    raise ConfigError("imported on " + seen.get("thread", "no thread"))
ray_connect.connect_ray = connect_ray

from raysim.cli import main
main(["run", "fedvpt", "--dataset", "synthetic"])
"""


def test_raysim_run_imports_the_driver_on_the_set_up_thread_while_ray_starts(tmp_path):
    """The driver's 3-5 s of imports overlap Ray's start (``cli.driver_and_data``), not precede it."""
    done = subprocess.run([sys.executable, "-c", DRIVER_IMPORTED_ON], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == "raysim: error: imported on raysim-setup"
    assert not list(tmp_path.iterdir())  # refused before anything was written
