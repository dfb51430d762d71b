"""Bit-identity harness: every registered method for 3 rounds on one small fixed config, dumped and compared.

Runs each method through the public ``run`` entry point on the sequential backend (one torch thread), then
writes, per method, the per-round metrics (timings left out: they measure the machine) and every final tensor
(global parameters, server state, each client's persistent state, from the run's final checkpoint). A refactor
that claims "the numbers stay bit-identical" saves a dump before and compares after, on the same machine and
precision:

    python bench/regression.py --save /tmp/before            # on the old commit
    python bench/regression.py --compare /tmp/before         # on the new one: exit 1 on any difference

``--precision fp32|bf16`` forces the precision (default: what ``auto`` picks here); ``--cohort on|off`` forces cohort
training or not (cohorts are exact only within float tolerance; ``auto`` trains in cohorts only with GPUs);
``--methods a,b`` a subset.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from safetensors.torch import load_file, save_file

from raysim.config import build_config
from raysim.core.registry import METHODS
from raysim.engine.driver import run
from raysim.ops.metrics import TIMING_KEYS
from raysim.tracking.checkpoint import load as load_checkpoint

SMALL = {
    "federation": {"clients": 8, "rounds": 3, "participation": 0.5, "seed": 5, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "domains"},  # typed clients: the FedGCR family runs too
    "train": {"batch_size": 8},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
    "checkpoint": {"every": 0, "keep": 1},
}
OPTIONS = {"fedgcr": {"clusters": 2}, "fedv": {"fedround": 2}, "fedvz": {"fedround": 2}, "festa": {"fedround": 2}}


def layers_for(method: str, precision: str | None, cohort: str, store: Path) -> list[dict]:
    options_key = METHODS.get(method).options_key
    own = {options_key: OPTIONS[options_key]} if options_key in OPTIONS else {}
    forced = {"train": {"cohort": cohort, **({"precision": precision} if precision else {})}}
    where = {"tracking": {"tracking_uri": f"sqlite:///{store}/mlflow.db"}, "checkpoint": {"dir": str(store / "ck")}}
    return [SMALL, own, forced, where]


def run_method(method: str, precision: str | None, cohort: str) -> tuple[list[dict], dict[str, torch.Tensor], str]:
    """(per-round metrics without timings, every final tensor by name, the resolved precision)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = build_config(method, layers_for(method, precision, cohort, Path(tmp)))
        result = run(config, show_progress=False, console=Console(file=io.StringIO()))
        final = load_checkpoint(Path(tmp) / "ck" / result.run_id)
    history = [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in result.history]
    tensors = {f"params/{k}": v for k, v in final.state.params.items()}
    tensors.update({f"server/{k}": v for k, v in final.state.server.items()})
    for client, state in final.client_states.items():
        tensors.update({f"client/{client}/{k}": v for k, v in state.items()})
    return history, {k: v.contiguous().clone() for k, v in tensors.items()}, final.config["train"]["precision"]


def differences(method: str, folder: Path, history: list[dict], tensors: dict[str, torch.Tensor]) -> list[str]:
    saved_history = json.loads((folder / f"{method}.json").read_text())["history"]
    saved = load_file(str(folder / f"{method}.safetensors"))
    found = []
    if saved_history != json.loads(json.dumps(history)):
        rounds = [i + 1 for i, (a, b) in enumerate(zip(saved_history, history)) if a != b]
        found.append(f"metrics differ (rounds {rounds or 'count'})")
    if set(saved) != set(tensors):
        found.append(f"tensor names differ: {sorted(set(saved) ^ set(tensors))[:6]}")
    found += [
        f"{name} differs" for name in sorted(set(saved) & set(tensors)) if not torch.equal(saved[name], tensors[name])
    ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--save", type=Path, help="write the dump here")
    target.add_argument("--compare", type=Path, help="compare with the dump here; exit 1 on any difference")
    parser.add_argument("--precision", choices=("fp32", "bf16"))
    parser.add_argument("--cohort", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--methods", help="comma-separated subset (default: every registered method)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    methods = args.methods.split(",") if args.methods else list(METHODS)
    failed = 0
    for method in methods:
        history, tensors, precision = run_method(method, args.precision, args.cohort)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            save_file(tensors, str(args.save / f"{method}.safetensors"))
            (args.save / f"{method}.json").write_text(json.dumps({"precision": precision, "history": history}))
            print(f"{method:10} saved: {len(history)} rounds, {len(tensors)} tensors ({precision})", flush=True)
            continue
        found = differences(method, args.compare, history, tensors)
        failed += bool(found)
        print(
            f"{method:10} {'IDENTICAL' if not found else 'DIFFERENT: ' + '; '.join(found[:4])} "
            f"({len(history)} rounds, {len(tensors)} tensors, {precision})",
            flush=True,
        )
    if args.compare:
        print(f"{len(methods) - failed} of {len(methods)} methods bit-identical")
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
