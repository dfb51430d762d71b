"""One file per method; importing this package registers them all (shipped as ``raysim.algorithms``)."""

from raysim.algorithms import (  # noqa: F401
    afl,
    ditto,
    fedavg,
    fedgcr,
    fedprox,
    fedrod,
    fedv,
    fedvpt,
    fedvpt_d,
    festa,
    fgpt,
    head_tune,
    qffl,
    sgpt,
    term,
)
