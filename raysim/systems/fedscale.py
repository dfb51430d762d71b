"""Convert FedScale's device traces to raysim's trace layout (docs/systems.md).

    python -m raysim.systems.fedscale client_device_capacity client_behave_trace trace.csv [--clients N]

FedScale (Lai et al., ICML 2022) ships two pickled dicts keyed by client id
(``benchmark/dataset/data/device_info``):

- ``client_device_capacity``: ``{id: {"computation": ms per sample of inference, "communication": kbit/s}}``;
- ``client_behave_trace``: ``{id: {"active": [s, ...], "inactive": [s, ...], "finish_time": s, ...}}``, the client
  online from ``active[i]`` to ``inactive[i]`` within a period of ``finish_time`` seconds.

FedScale costs a trained sample 3x its inference latency (``augmentation_factor=3.0`` in ``client_metadata.py``)
and sends a model of ``bytes / 1024 * 8`` "kbits" at ``communication`` of those a second (``model_update_size`` in
its aggregator), so raysim's speed is ``1000 / (3 * computation)`` samples/s and both links are
``communication * 1024 / 8`` bytes/s. Interval times are written exactly, ends clipped to ``finish_time``. Clients
are renumbered 0..K-1 in FedScale's id order (``--clients N`` keeps the first N). The pickles are read with an
unpickler that builds only plain containers and numbers, never code.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd

KBIT = 1024 / 8  # bytes a second in one of FedScale's kbit/s (its model size is bytes / 1024 * 8 kbits)
PLAIN = {("builtins", name) for name in ("dict", "list", "tuple", "int", "float", "str", "set")}


class PlainUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists and numbers only; anything else (a class, a function) is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) in PLAIN:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing {module}.{name}: a FedScale trace holds only dicts, lists, numbers")


def load_plain(path: str | Path) -> dict:
    with open(path, "rb") as file:
        return PlainUnpickler(file).load()


def convert(capacity: dict, behaviour: dict, clients: int | None = None) -> pd.DataFrame:
    """raysim's trace table from FedScale's two dicts: the clients that have both and are ever active before their
    trace's end (FedScale never activates another), in id order, the first ``clients`` of them."""
    ids = sorted(set(capacity) & set(behaviour))
    rows = []
    for old_id in ids:
        if clients is not None and len(rows) == clients:
            break
        device, trace = capacity[old_id], behaviour[old_id]
        if not float(device["computation"]) > 0:
            raise ValueError(f"client {old_id}'s computation is {device['computation']!r}, not a latency > 0 ms")
        if not float(device["communication"]) > 0:
            raise ValueError(f"client {old_id}'s communication is {device['communication']!r}, not a rate > 0 kbit/s")
        period = float(trace["finish_time"])
        spans = [(float(a), min(float(b), period)) for a, b in zip(trace["active"], trace["inactive"])]
        if not any(a < b for a, b in spans):  # an empty cell reads as always online: FedScale never has it active
            continue
        rows.append(
            {
                "client": len(rows),
                "speed": 1000.0 / (3.0 * float(device["computation"])),
                "downlink": float(device["communication"]) * KBIT,
                "uplink": float(device["communication"]) * KBIT,
                "period_s": period,
                "online": " ".join(f"{_exact(a)}-{_exact(b)}" for a, b in spans if a < b),
            }
        )
    return pd.DataFrame(rows)


def _exact(seconds: float) -> str:
    """``seconds`` as the trace reader takes a time: its exact value, without an exponent (``5e-05-50.0`` would read
    as a bad interval)."""
    return np.format_float_positional(seconds, trim="0")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raysim.systems.fedscale", description=__doc__.splitlines()[0])
    parser.add_argument("capacity", help="FedScale's client_device_capacity pickle")
    parser.add_argument("behaviour", help="FedScale's client_behave_trace pickle")
    parser.add_argument("out", help="the trace to write (.csv or .parquet)")
    parser.add_argument("--clients", type=int, default=None, help="keep the first N clients")
    args = parser.parse_args(argv)
    if args.clients is not None and args.clients < 1:
        parser.error(f"--clients {args.clients} must be at least 1")
    try:
        table = convert(load_plain(args.capacity), load_plain(args.behaviour), args.clients)
    except (OSError, pickle.UnpicklingError, KeyError, TypeError, ValueError) as error:
        print(f"error: could not convert the FedScale trace: {error}", file=sys.stderr)
        return 2
    if table.empty:
        print("error: the two FedScale files share no client id", file=sys.stderr)
        return 2
    out = Path(args.out)
    table.to_parquet(out, index=False) if out.suffix == ".parquet" else table.to_csv(out, index=False)
    print(f"wrote {len(table)} clients to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
