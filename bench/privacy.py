"""What differential privacy costs in time on this machine (docs/performance.md, "Privacy").

Step (the default): one local step of batch 16 on one thread, as a client worker runs it, of the offline default
model (raysim ViT-Tiny, 32 px) for FedVPT (prompts + head) and FedAvg (every weight): the plain step against
record-level DP-SGD's (:mod:`raysim.privacy.dp_sgd`: one backward pass per row, each row's gradient clipped, the
sum noised), in ms per step and their ratio.

Round (``--round``): the steady round (mean ``round_time_s`` of rounds 2..R-1; round R evaluates) of a sequential
FedVPT run on the offline default, 100 clients, 10 a round, without privacy and with user-level DP (the same run's
clipping and noise at the server), and their ratio.

    python bench/privacy.py
    python bench/privacy.py --round [--rounds 6]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time

import numpy as np


def steps(repeats: int) -> None:
    import torch

    from raysim.base.memory import reuse_freed_memory
    from raysim.config import build_config
    from raysim.core.registry import get_method
    from raysim.core.training import make_optimizer
    from raysim.models.factory import build_model
    from raysim.privacy.dp_sgd import DPSGD

    torch.set_num_threads(1)
    reuse_freed_memory()
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 3, 32, 32, generator=generator), torch.randint(0, 62, (16,), generator=generator)
    rows = np.arange(16)
    print(f"{'ms per step of 16 rows':28}{'plain':>8}{'DP-SGD':>9}{'ratio':>8}")
    for name in ("fedvpt", "fedavg"):
        config = build_config(name, [])
        method = get_method(name).cls(config)
        model = build_model(config, method, 62)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = make_optimizer(params, config.train)

        def objective(x, y, rows):
            return torch.nn.functional.cross_entropy(model(x), y)

        def plain():
            optimizer.zero_grad(set_to_none=True)
            objective(x, y, rows).backward()
            optimizer.step()

        private = DPSGD(1.0, 1.0, client_seed=0)

        def dp_sgd():
            private.step(optimizer, params, objective, x, y, rows)

        model.train()
        times = {}
        for label, step in (("plain", plain), ("DP-SGD", dp_sgd)):
            step()
            start = time.perf_counter()
            for _ in range(repeats):
                step()
            times[label] = (time.perf_counter() - start) / repeats * 1000
        print(f"{name:28}{times['plain']:8.1f}{times['DP-SGD']:9.1f}{times['DP-SGD'] / times['plain']:8.2f}")


def rounds(count: int) -> None:
    from rich.console import Console

    from raysim.config import build_config
    from raysim.engine.driver import run

    base = {
        "federation": {"clients": 100, "participation": 0.1, "rounds": count, "eval_every": count},
        "resources": {"backend": "sequential"},
        "checkpoint": {"every": 0},
    }
    private = {"privacy": {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3}}
    steady = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, layers in (("no privacy", [base]), ("user-level DP", [base, private])):
            layers = [*layers, {"tracking": {"tracking_uri": f"sqlite:///{tmp}/mlflow.db"}}]
            result = run(build_config("fedvpt", layers), show_progress=False, console=Console(file=io.StringIO()))
            times = [h["round_time_s"] for h in result.history[1:] if h["round"] != count]  # no evaluation
            steady[label] = statistics.mean(times)
            print(f"{label:16} steady round {steady[label]:.3f} s (rounds 2..{count - 1})")
    print(f"ratio {steady['user-level DP'] / steady['no privacy']:.3f}")
    server_step(steady["no privacy"])


def server_step(round_s: float) -> None:
    """What user-level DP adds to a round at the server: clipping the cohort's 10 updates, noising their sum."""
    import torch

    from raysim.config import build_config
    from raysim.core.messages import ClientUpdate, GlobalState
    from raysim.core.registry import get_method
    from raysim.models.factory import build_model
    from raysim.privacy.cohort_view import CohortView

    layers = [{"federation": {"clients": 100}, "privacy": {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3}}]
    config = build_config("fedvpt", layers)
    method = get_method("fedvpt").cls(config)
    state = GlobalState(build_model(config, method, 62).trainable_state())
    generator = torch.Generator().manual_seed(0)
    updates = [
        ClientUpdate(c, 50, {k: v + 0.01 * torch.randn(v.shape, generator=generator) for k, v in state.params.items()})
        for c in range(10)
    ]
    view = CohortView(config, method)
    view.view(1, state, updates, 1.0)
    start = time.perf_counter()
    for round in range(20):
        view.view(round, state, updates, 1.0)
    seconds = (time.perf_counter() - start) / 20
    size = sum(v.numel() for v in state.params.values())
    share = seconds / round_s
    print(f"server's DP step: {seconds * 1000:.1f} ms for 10 updates of {size:,} numbers, {share:.2%} of the round")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round", action="store_true", help="time the steady round instead of the local step")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rounds(args.rounds) if args.round else steps(args.repeats)


if __name__ == "__main__":
    main()
