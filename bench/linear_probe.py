"""Does pretraining matter? Linear-probe accuracy of the offline backbone: shipped weights vs random init.

A logistic-regression head is fitted on frozen features of each dataset's train rows and scored on its
test rows. Target: the pretrained backbone is at least 20 points better on each dataset.

    python bench/linear_probe.py                          # the shipped weights
    python bench/linear_probe.py --weights my.safetensors # e.g. a file made by `raysim pretrain --out ...`
"""

from __future__ import annotations

import argparse
import logging
import time

import ray

from raysim.config import DataConfig
from raysim.data.sources import load_dataset
from raysim.engine.pretrain import linear_probe
from raysim.models.backbones import DEFAULT_BACKBONE, build_backbone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="a backbone safetensors file instead of the shipped one")
    parser.add_argument("--datasets", nargs="+", default=["glyphs62", "digits5"])
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    ray.data.DataContext.get_current().enable_progress_bars = False
    backbones = {
        "pretrained" + (f" ({args.weights})" if args.weights else " (shipped)"): build_backbone(
            DEFAULT_BACKBONE, weights=args.weights, pretrained=args.weights is None
        ),
        "random init": build_backbone(DEFAULT_BACKBONE, pretrained=False, seed=0),
    }
    print(f"linear probe on frozen {DEFAULT_BACKBONE} features (test accuracy %)")
    print(f"{'dataset':14}" + "".join(f"{name:>34}" for name in backbones) + f"{'gap':>8}{'s':>6}")
    for dataset in args.datasets:
        start = time.perf_counter()
        _, arrays = load_dataset(DataConfig(dataset=dataset))
        scores = [linear_probe(vit, arrays) for vit in backbones.values()]
        print(
            f"{dataset:14}" + "".join(f"{s:34.2f}" for s in scores) + f"{scores[0] - scores[1]:8.2f}"
            f"{time.perf_counter() - start:6.0f}"
        )


if __name__ == "__main__":
    main()
