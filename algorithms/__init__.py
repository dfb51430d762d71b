"""One file per method; importing this package registers them all (shipped as ``raysim.algorithms``)."""

from raysim.algorithms import fedavg, fedprox, fedvpt, fedvpt_d, fgpt, head_tune, sgpt  # noqa: F401
