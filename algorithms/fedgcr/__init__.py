"""FedGCR (Zheng et al., AAAI 2024) and its two ablations, FedGC and FedGR: the declaration (description, family,
options, capabilities), read without torch; the class is in ``method.py``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.algorithms._declarations import PROMPT_TOKENS
from raysim.base.errors import ConfigError
from raysim.base.settings import Settings, at_least, in_range, non_negative, positive, setting
from raysim.core.registry import declare

CLIENT_LOSSES = ("local", "global")  # fedgcr.client_loss: L_ij from Algorithm 1's local loss or the authors' code
COVARIANCES = ("full", "tied", "diag", "spherical")  # fedgcr.covariance: the GMM's (scikit-learn's names)


@dataclass(frozen=True)
class FedGCROptions(Settings):
    """FedGCR (Zheng et al., AAAI 2024), shared by its ablations ``fedgc`` and ``fedgr``; defaults are the paper's.
    Its authors' FedGR is ``reweighting=code`` with ``client_loss=global``."""

    prompts: int = setting(
        4, "Global prompts n (tokens before block 0, each customised by GC-Net).", checks=(at_least(1), PROMPT_TOKENS)
    )
    clusters: int = setting(
        5,
        "T', the Gaussian mixture's components over the clients' h_tilde (anonymous client types).",
        checks=(at_least(1),),
    )
    lambda1: float = setting(0.5, "lambda1, weight of the group-customisation loss l_GC.", checks=(non_negative(),))
    lambda2: float = setting(
        0.1, "lambda2, weight of the representation-alignment loss l_RA.", checks=(non_negative(),)
    )
    tau: float = setting(
        0.5, "tau, the temperature of l_GC (Eq. 7) and, with contrast=paper, of l_RA (Eq. 8).", checks=(positive(),)
    )
    contrast: str = setting(
        "paper",
        "l_GC and l_RA as the paper (dot products over tau) or as the authors' code (cosine similarities, no "
        "temperature in l_RA; pair it with smaller lambdas, about 0.05-0.1).",
        choices=("paper", "code"),
    )
    delta: float = setting(
        0.5, "delta of the reweighting schedule beta = delta (1 - gamma^(r-1)).", checks=(in_range(0, 1),)
    )
    gamma: float = setting(
        0.5, "gamma of the reweighting schedule beta = delta (1 - gamma^(r-1)).", checks=(in_range(0, 1),)
    )
    q: float = setting(
        1.0, "q, the fairness exponent of FedGR's weights (L_ij^(1-beta) Lbar_i^beta)^(q+1).", checks=(non_negative(),)
    )
    reweighting: str = setting(
        "paper",
        "FedGR as the paper, or as the authors' code (quantised losses, a 0.9^t power mix, data-weighted cluster "
        "means, beta fixed at delta).",
        choices=("paper", "code"),
    )
    client_loss: str = setting(
        "local",
        "FedGR's L_ij: 'local', the trained objective over the last local epoch (Algorithm 1), or 'global', the "
        "received model's CE on the client's train rows (the authors' code).",
        choices=CLIENT_LOSSES,
    )
    covariance: str = setting("full", "Covariance of the Gaussian mixture (scikit-learn's names).", choices=COVARIANCES)


def clusters_within_a_round(config) -> None:
    """The Gaussian mixture fits T' components to the h_tilde of one round's clients: T' <= the clients a round."""
    per_round = config.federation.clients_per_round
    if config.options.clusters > per_round:
        raise ConfigError(
            f"fedgcr.clusters={config.options.clusters} (T') is more than the {per_round} "
            f"client{'s' if per_round != 1 else ''} taking part each round; lower it or raise --participation"
        )


FEDGCR = dict(  # FedGCR's and its two ablations'
    family="domain",
    options=FedGCROptions,
    options_key="fedgcr",
    metrics=("clusters_used", "cluster_acc"),
    needs_client_types=True,
    setting="offline-digit5-dif10",  # digits5's domains as client types: no download
    smoke={"data": {"partition": "domains"}, "fedgcr": {"clusters": 2}},  # the smoke tests' 3 clients a round: T' 2
    check=clusters_within_a_round,
)

declare(
    "fedgcr",
    "raysim.algorithms.fedgcr.method:FedGCR",
    "group customisation (GC-Net prompts, l_GC, l_RA) + group reweighting by GMM clusters (AAAI 2024)",
    **FEDGCR,
)

declare(
    "fedgc",
    "raysim.algorithms.fedgcr.method:FedGC",
    "FedGCR's group customisation alone: GC-Net prompts, l_GC, l_RA, FedAvg aggregation (ablation)",
    **FEDGCR,
)

declare(
    "fedgr",
    "raysim.algorithms.fedgcr.method:FedGR",
    "FedGCR's group reweighting alone: plain prompts, loss-reweighted aggregation by GMM clusters (ablation)",
    **FEDGCR,
)
