"""What bf16 autocast buys (or costs) on this machine: speed, and accuracy against float32.

Speed (the default): times, on one thread as a client worker runs, a local training step of each of SGPT's two
blocks (batch 16) and an evaluation forward (batch 256), in float32 and under bf16 autocast; then the same with
oneDNN limited to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``, ``ATEN_CPU_CAPABILITY=avx2``), which is how a CPU without AVX-512
BF16 or AMX runs bf16.

Accuracy (``--accuracy``): for each offline setting (the presets' datasets, short, and issue 17's low-contrast
parquet) and each method that may run in bf16, the final global accuracy in float32 and in bf16 over the same seeds
(seed s: the same partition, initialisation and sampling in both), and their paired difference (bf16 - fp32, mean
and 95% Student-t CI over seeds): the gap ``train.precision=auto`` may ignore only where it is within noise. Runs go
on the sequential backend (the Ray backend's numbers: tests/engine/test_executors.py) with ``--threads`` torch
threads, so two invocations with disjoint ``--methods`` share a 2-core machine. Run it on a CPU with native bf16
(AVX-512 BF16 or AMX): elsewhere bf16 is emulated and about 15x slower.

    python bench/precision.py
    python bench/precision.py --accuracy [--settings offline-s10,low-contrast] [--methods fedvpt,sgpt] [--seeds 3]
                                         [--rounds 5] [--threads 1] [--tracking-uri sqlite:///runs.db]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def per_row_ms(run, rows: int, repeats: int) -> float:
    run()  # warm-up (oneDNN primitive creation)
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats / rows * 1000


def measure() -> None:
    import torch

    from raysim.base.memory import reuse_freed_memory
    from raysim.base.precision import autocast
    from raysim.config import build_config
    from raysim.core.registry import get_method
    from raysim.models.factory import build_model

    torch.set_num_threads(1)
    reuse_freed_memory()  # as a client worker's process does
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


LOW_CONTRAST_ROWS, LOW_CONTRAST_CLASSES = 20_000, 10
SETTINGS = {  # name -> (preset, extra layer): the offline settings, short, evaluated after the last round
    "offline-s10": ("offline-s10", {}),
    "digits-iid": ("digits-iid", {}),
    "five-sources": ("offline-five-sources", {}),
    "digit5-dif10": ("offline-digit5-dif10", {}),
    "synthetic": ("quick", {}),
    "low-contrast": (  # issue 17's workload: random-init ViT-Tiny, SGD 0.01, batch 32, IID, 100 clients, 5 a round
        None,
        {
            "federation": {"clients": 100, "participation": 0.05},
            "data": {"dataset": "parquet", "partition": "iid"},
            "model": {"backbone": "raysim_vit_tiny_p4_32", "pretrained": False},
            "train": {"optimizer": "sgd", "lr": 0.01, "batch_size": 32, "local_epochs": 1},
        },
    ),
}


def low_contrast() -> Path:
    """20,000 32x32 RGB PNGs in 10 classes, a faint class pattern (amplitude 24 on a 120-136 background, noise 2):
    the images on which bf16 with autocast's cast cache lost 40 points (issue 17). Written once to the data cache,
    so every invocation decodes it once."""
    import pyarrow.parquet as pq

    from raysim.data.parquet import png_table
    from raysim.data.sources import cache_dir

    path = cache_dir() / "bench" / "low-contrast.parquet"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    patterns = np.kron(rng.random((LOW_CONTRAST_CLASSES, 4, 4, 3)), np.ones((1, 8, 8, 1)))
    labels = rng.integers(0, LOW_CONTRAST_CLASSES, LOW_CONTRAST_ROWS)
    background = rng.uniform(120, 136, (LOW_CONTRAST_ROWS, 1, 1, 1))
    noise = rng.normal(0, 2, (LOW_CONTRAST_ROWS, 32, 32, 3))
    images = np.clip(background + 24 * patterns[labels] + noise, 0, 255).astype(np.uint8)
    split = np.where(np.arange(LOW_CONTRAST_ROWS) % 5 == 0, "test", "train")
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    pq.write_table(png_table(images, labels, split), str(partial))
    os.replace(partial, path)  # two invocations may write it at once; either file is the same
    return path


def one_run(method: str, setting: str, precision: str, seed: int, args) -> tuple[float, float]:
    """(final global accuracy, minutes) of one sequential run."""
    from rich.console import Console

    from raysim.config import build_config, load_preset, preset_for_method
    from raysim.engine.driver import run

    preset, extra = SETTINGS[setting]
    layers = [preset_for_method(load_preset(preset), method)] if preset else []
    if setting == "low-contrast":
        extra = {**extra, "data": {**extra["data"], "data_dir": str(low_contrast())}}
    layers += [
        extra,
        {
            "federation": {"rounds": args.rounds, "eval_every": args.rounds, "seed": seed},
            "train": {"precision": precision},
            "resources": {"backend": "sequential", "threads": args.threads},
            "tracking": {"tracking_uri": args.tracking_uri, "experiment": f"precision-{setting}"},
        },
    ]
    start = time.perf_counter()
    result = run(build_config(method, layers), show_progress=False, console=Console(file=io.StringIO()))
    return result.summary["global_acc"]["final"], (time.perf_counter() - start) / 60


def _verdict(mean: float, half: float) -> str:
    if np.isnan(half):
        return "one seed: no interval"
    if mean == half == 0:
        return "identical"
    if abs(mean) <= half:
        return "within noise"
    return "bf16 lower" if mean < 0 else "bf16 higher"


def accuracy(argv: list[str]) -> None:
    """fp32 against bf16 autocast, per setting and method, paired over seeds; one markdown row each as it finishes."""
    from raysim.base.errors import ConfigError
    from raysim.base.precision import native_bf16_cpu
    from raysim.core.registry import METHODS, get_method
    from raysim.tracking.provenance import cpu_model
    from raysim.tracking.statistics import interval, paired

    parser = argparse.ArgumentParser(description="bf16 against float32 accuracy, per setting and method")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--methods", help="comma-separated (default: every method that may run in bf16)")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated of {', '.join(SETTINGS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--tracking-uri", help="MLflow store that keeps the runs (default: a temporary one)")
    args = parser.parse_args(argv)
    methods = args.methods.split(",") if args.methods else [m for m in METHODS if get_method(m).bf16]
    with tempfile.TemporaryDirectory() as tmp:
        args.tracking_uri = args.tracking_uri or f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        settings = args.settings.split(",")
        print(
            f"{cpu_model()}, native bf16 {'yes' if native_bf16_cpu() else 'no'}, {args.threads} torch thread(s); "
            f"{args.rounds} rounds, seeds 0..{args.seeds - 1}; final global accuracy (%), mean [95% CI half-width]"
        )
        print("| setting | method | fp32 | bf16 | bf16 - fp32, paired | seeds agreeing | verdict | bf16/fp32 time |")
        print("|---|---|---|---|---|---|---|---|")
        for setting in settings:
            for method in methods:
                try:
                    runs = {
                        p: [one_run(method, setting, p, seed, args) for seed in range(args.seeds)]
                        for p in ("fp32", "bf16")
                    }
                except ConfigError as error:  # e.g. a method that needs client types on a partition without them
                    print(f"| {setting} | {method} | not run: {error} | | | | | |", flush=True)
                    continue
                acc = {p: {seed: r[0] for seed, r in enumerate(rows)} for p, rows in runs.items()}
                minutes = {p: sum(r[1] for r in rows) for p, rows in runs.items()}
                mean, half, agree, n = paired(acc["fp32"], acc["bf16"])
                verdict = _verdict(mean, half)
                means = {p: "{:.2f} [±{:.2f}]".format(*interval(list(acc[p].values()))) for p in acc}
                print(
                    f"| {setting} | {method} | {means['fp32']} | {means['bf16']} | {mean:+.2f} ± {half:.2f} | "
                    f"{agree}/{n} | {verdict} | {minutes['bf16'] / minutes['fp32']:.2f} |",
                    flush=True,
                )


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return
    if "--measure" in sys.argv:
        measure()
        return
    if "--accuracy" in sys.argv:
        accuracy(sys.argv[1:])
        return
    from raysim.base.precision import native_bf16_cpu

    print(f"this CPU: native bf16 {'yes' if native_bf16_cpu() else 'no'}")
    for label, extra in (("as this machine runs", {}), ("oneDNN limited to AVX2 (no native bf16)", AVX2)):
        print(f"\n{label}:", flush=True)
        subprocess.run([sys.executable, __file__, "--measure"], env={**os.environ, **extra}, check=True)


if __name__ == "__main__":
    main()
