"""The virtual clock of one round, on the method's real byte and sample counts (FedScale's completion-time model,
Lai et al., "FedScale: Benchmarking Model and System Performance of Federated Learning at Scale", ICML 2022, Sec. 4).

A selected client finishes at ``download + compute + upload`` seconds after the round starts:
``bytes_down / downlink + samples / speed + bytes_up / uplink``. The server keeps the first ``m`` updates that
arrive by the deadline (every update under ``wait``); a straggler (later than the deadline) is dropped, waited for,
or cut to the work it gets through by the deadline (``partial``). The round closes when the ``m``-th kept update
arrives; with fewer than ``m`` it closes at the deadline if one was missed (a straggler or a dropout the server
cannot tell from one), or when the last kept update arrives if that is later (a straggler waited for), else when the
last kept update arrives. Nothing here reads wall time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def finish_times(
    bytes_down: np.ndarray,
    samples: np.ndarray,
    bytes_up: np.ndarray,
    speed: np.ndarray,
    downlink: np.ndarray,
    uplink: np.ndarray,
) -> np.ndarray:
    """Seconds from the round's start until each client's update has arrived (``inf`` rates cost nothing)."""
    return bytes_down / downlink + samples / speed + bytes_up / uplink


def work_by_deadline(deadline: float, communication: np.ndarray, samples: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """A straggler's share of its samples it trains by the deadline, after its download and upload: in [0, 1]."""
    left = np.asarray(deadline - communication, dtype=float)
    budget = np.multiply(left, speed, out=np.zeros_like(left), where=left > 0)  # no time left: none, at any speed
    return np.clip(np.divide(budget, samples, out=np.ones_like(budget), where=samples > 0), 0.0, 1.0)


@dataclass(frozen=True)
class Settlement:
    """Which clients' updates the round keeps, which arrived in time but after the first ``m``, and how long the
    round took."""

    kept: list[int]
    over_selected: list[int]
    duration: float


def settle(
    clients: list[int],
    finish: np.ndarray,
    usable: np.ndarray,
    m: int,
    deadline: float,
    missing: int = 0,
    lost_until: float = 0.0,
) -> Settlement:
    """Settle a round.

    Args:
        clients: the clients that reported (not the dropouts); ``finish``: when each update arrived.
        usable: whether each can be kept: on time, or a straggler under ``wait``, or one cut to its work by the
            deadline under ``partial`` (whose ``finish`` is then that of the cut work).
        m: the updates the round needs (``federation.clients_per_round``); ``deadline``: seconds, 0 for none.
        missing: selected clients that never report (dropouts); like an unusable straggler, they make a round that
            falls short of ``m`` wait for the deadline.
        lost_until: when the last of the dropouts whose device went offline mid-round left: a round short of ``m``
            without a deadline ends no earlier, since until then the server still waits for its update.
    """
    finish, usable = np.asarray(finish, dtype=float), np.asarray(usable, dtype=bool)
    order = sorted((i for i in range(len(clients)) if usable[i]), key=lambda i: (finish[i], clients[i]))
    kept, extra = order[:m], order[m:]
    if kept and len(kept) == m:
        duration = float(finish[kept[-1]])
    elif deadline > 0 and (missing or not usable.all()):  # waits for the deadline, and for a straggler kept past it
        duration = max(float(deadline), float(finish[kept].max()) if kept else 0.0)
    else:
        duration = max(float(finish[kept].max()) if kept else 0.0, float(lost_until))
    return Settlement(sorted(clients[i] for i in kept), sorted(clients[i] for i in extra), duration)
