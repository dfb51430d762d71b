"""One file per method; importing this package registers them all (shipped as ``raysim.algorithms``)."""

from raysim.algorithms import fedavg, fedprox, fedvpt, fedvpt_d, head_tune  # noqa: F401
