"""What bf16 autocast buys (or costs) on this machine: speed, and accuracy against float32.

Speed (the default): times, on one thread as a client worker runs, a local training step of each of SGPT's two
blocks (batch 16) and an evaluation forward (batch 256), in float32 and under bf16 autocast; then the same with
oneDNN limited to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``, ``ATEN_CPU_CAPABILITY=avx2``), which is how a CPU without AVX-512
BF16 or AMX runs bf16.

Accuracy (``--accuracy``): for each method, ``raysim compare METHOD:train.precision=fp32 METHOD:train.precision=bf16``
on one setting over several seeds: the report's paired difference (bf16 - fp32, mean and 95% CI over seeds) is the
gap ``train.precision=auto`` may ignore only where it is within noise. Run it on a CPU with native bf16 (AVX-512
BF16 or AMX): elsewhere bf16 is emulated and about 15x slower.

    python bench/precision.py
    python bench/precision.py --accuracy [--methods fedvpt sgpt ...] [--seeds 3] [--rounds 8] [--preset offline-s10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def per_row_ms(run, rows: int, repeats: int) -> float:
    run()  # warm-up (oneDNN primitive creation)
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats / rows * 1000


def measure() -> None:
    import torch

    from raysim.config import build_config
    from raysim.core.registry import get_method
    from raysim.engine.precision import autocast
    from raysim.models.factory import build_model

    torch.set_num_threads(1)
    config = build_config("sgpt", [])
    method = get_method("sgpt").cls(config)
    model = build_model(config, method, 62)
    generator = torch.Generator().manual_seed(0)
    cpu = torch.device("cpu")
    blocks = {
        "shared (block I)": ({"prompts.shared", "vit.head.weight", "vit.head.bias"}, False),
        "group (block II)": ({"extra.group_prompts", "extra.selection_keys", "vit.head.weight", "vit.head.bias"}, True),
    }

    def batch(size):
        return (
            torch.randn(size, 3, 32, 32, generator=generator),
            torch.randint(0, 62, (size,), generator=generator),
            torch.randint(0, method.options.groups, (size,), generator=generator),
        )

    x, y, groups = batch(16)
    x_eval, _, groups_eval = batch(256)
    times = {}
    for precision in ("fp32", "bf16"):
        for label, (names, grouped) in blocks.items():

            def step():
                with autocast(cpu, precision):
                    loss = torch.nn.functional.cross_entropy(method.logits(model, x, groups if grouped else None), y)
                loss.backward()

            with model.training_only(names):
                times[precision, f"train step, {label}"] = per_row_ms(step, 16, 10)

        def evaluate():
            with torch.no_grad(), autocast(cpu, precision):
                method.logits(model, x_eval, groups_eval)

        times[precision, "evaluation forward"] = per_row_ms(evaluate, 256, 3)
    print(f"{'ms per row':32}{'fp32':>8}{'bf16':>8}{'bf16/fp32':>11}")
    for what in dict.fromkeys(w for _, w in times):
        fp32, bf16 = times["fp32", what], times["bf16", what]
        print(f"{what:32}{fp32:8.2f}{bf16:8.2f}{bf16 / fp32:11.2f}")


def accuracy(argv: list[str]) -> None:
    """One ``raysim compare`` per method: float32 against bf16 autocast, paired over seeds."""
    parser = argparse.ArgumentParser(description="bf16 against float32 accuracy, per method (raysim compare)")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--methods", nargs="+", default=["fedvpt", "sgpt"], help="methods (raysim ls methods)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--preset", default="offline-s10")
    args, rest = parser.parse_known_args(argv)
    for method in args.methods:
        arms = [f"{method}:train.precision={precision}" for precision in ("fp32", "bf16")]
        command = [sys.executable, "-m", "raysim.cli", "compare", *arms, "--preset", args.preset]
        command += ["--seeds", str(args.seeds), "--rounds", str(args.rounds), "--eval-every", "2"]
        command += ["--experiment", f"precision-{method}-{args.preset}-r{args.rounds}", *rest]
        print(" ".join(command), flush=True)
        subprocess.run(command, check=True)


def main() -> None:
    if "--measure" in sys.argv:
        measure()
        return
    if "--accuracy" in sys.argv:
        accuracy(sys.argv[1:])
        return
    from raysim.engine.precision import native_bf16_cpu

    print(f"this CPU: native bf16 {'yes' if native_bf16_cpu() else 'no'}")
    for label, extra in (("as this machine runs", {}), ("oneDNN limited to AVX2 (no native bf16)", AVX2)):
        print(f"\n{label}:", flush=True)
        subprocess.run([sys.executable, __file__, "--measure"], env={**os.environ, **extra}, check=True)


if __name__ == "__main__":
    main()
