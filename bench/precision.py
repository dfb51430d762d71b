"""What bf16 autocast buys (or costs) on this machine: SGPT's client compute on the default backbone, per row.

Times, on one thread as a client worker runs, a local training step of each of SGPT's two blocks (batch 16) and
an evaluation forward (batch 256), in float32 and under bf16 autocast; then the same with oneDNN limited to
AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``, ``ATEN_CPU_CAPABILITY=avx2``), which is how a CPU without AVX-512 BF16 or AMX
runs bf16. ``train.precision=auto`` picks bf16 only where the first table says it is faster.

    python bench/precision.py
"""

from __future__ import annotations

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


def main() -> None:
    if "--measure" in sys.argv:
        measure()
        return
    from raysim.engine.precision import native_bf16_cpu

    print(f"this CPU: native bf16 {'yes' if native_bf16_cpu() else 'no'}")
    for label, extra in (("as this machine runs", {}), ("oneDNN limited to AVX2 (no native bf16)", AVX2)):
        print(f"\n{label}:", flush=True)
        subprocess.run([sys.executable, __file__, "--measure"], env={**os.environ, **extra}, check=True)


if __name__ == "__main__":
    main()
