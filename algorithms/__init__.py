"""The methods' catalog: what each method is (its description, family, options and what it supports) and which class
implements it, one :func:`~raysim.core.registry.declare` per method. Importing this package fills the registry
without importing a method's module (nor torch): the config is built from it, and a method's module is imported
when the run first needs its class (``MethodInfo.cls``). One file per method beside it (shipped as
``raysim.algorithms``), each class marked ``@implements(name)``; the options in :mod:`raysim.algorithms.options`.

This package and ``options`` import only ``core`` (the registry, settings, prompt choices; no torch); a method's module
imports torch, ``core`` and ``ops``, never Ray or the engine (tests/test_layers.py)."""

from raysim.algorithms.options import (
    AFLOptions,
    DittoOptions,
    DualPromptOptions,
    EMOptions,
    FedGCROptions,
    FedMixOptions,
    FestaOptions,
    FGPTOptions,
    HarmoOptions,
    HNOptions,
    MOONOptions,
    PGOptions,
    PromptOptions,
    PROptions,
    ProxOptions,
    QFFLOptions,
    SAMOptions,
    SGPTOptions,
    SplitOptions,
    SPSAOptions,
    TERMOptions,
)
from raysim.core.registry import declare

GROUP_METRICS = (  # group prompts' per-round diagnostics (_group_prompts.GroupDiagnostics)
    "groups_selected",
    "q_entropy",
    "cluster_top_share",
    "cluster_groups_used",
    "cluster_acc",
    "kmeans_congruence",
)
SPLIT_TRAFFIC = ("activations", "gradients", "spsa", "params")  # what crosses the cut, counted each way per client
SPLIT_METRICS = (
    "lr_server",
    "server_compute_s",
    "server_concurrency",
    "client_compute_s",
    "transfer_s",
    *(f"bytes_{kind}" for kind in SPLIT_TRAFFIC),
)
SPLIT_FP32 = "the encoder server computes in float32 and byte counts assume float32 activations"
FEDGCR = dict(  # FedGCR's and its two ablations'
    family="domain",
    options=FedGCROptions,
    options_key="fedgcr",
    metrics=("clusters_used", "cluster_acc"),
    needs_client_types=True,
    setting="offline-digit5-dif10",  # digits5's domains as client types: no download
    smoke={"data": {"partition": "domains"}, "fedgcr": {"clusters": 2}},  # the smoke tests' 3 clients a round: T' 2
)
SPLIT = dict(family="split", metrics=SPLIT_METRICS, bf16=False)  # FedV's family

declare(
    "fedavg",
    "raysim.algorithms.fedavg:FedAvg",
    "FedAvg, full fine-tuning of backbone + head (McMahan et al. 2017)",
    family="global",
)
declare(
    "fedvpt",
    "raysim.algorithms.fedvpt:FedVPT",
    "prompt tuning (VPT-shallow) + head with FedAvg, a.k.a. PT-FedAvg",
    family="global",
    options=PromptOptions,
    cohort=True,
    tiers=True,
)
declare(
    "fedvpt-d",
    "raysim.algorithms.fedvpt_d:FedVPTDeep",
    "deep prompt tuning (VPT-deep, prompts at every block) + head with FedAvg",
    family="global",
    options=PromptOptions,
    options_key="fedvpt",
    cohort=True,
    tiers=True,
)
declare(
    "head-tune",
    "raysim.algorithms.head_tune:HeadTune",
    "FedAvg of the classifier head only, frozen backbone (linear probe)",
    family="global",
    cohort=True,
    tiers=True,
)
declare(
    "fedprox",
    "raysim.algorithms.fedprox:FedProx",
    "FedProx on prompts + head: local loss + (mu/2)||w - w_global||^2 (Li et al. 2020)",
    family="global",
    options=ProxOptions,
    cohort=True,
    tiers=True,
)
declare(
    "fedsam",
    "raysim.algorithms.fedsam:FedSAM",
    "FedSAM: sharpness-aware local steps (radius rho) on prompts + head, FedAvg aggregation (Qu et al. 2022)",
    family="global",
    options=SAMOptions,
)
declare(
    "moon",
    "raysim.algorithms.moon:MOON",
    "MOON: model-contrastive term between local, global and previous-local representations (Li et al. 2021)",
    family="global",
    options=MOONOptions,
)
declare(
    "fedmix",
    "raysim.algorithms.fedmix:FedMix",
    "FedMix: clients share data means once; local loss approximates mixup with the global means (Yoon et al. 2021)",
    family="global",
    options=FedMixOptions,
    bf16=False,
    fp32_reason="the Taylor term differentiates an input gradient (double backward through the frozen ViT)",
)
declare(
    "fedpr",
    "raysim.algorithms.fedpr:FedPR",
    "FedPR: prompt updates projected on the null space of the global prompt (Feng et al. 2023)",
    family="global",
    options=PROptions,
)
declare(
    "ditto",
    "raysim.algorithms.ditto:Ditto",
    "Ditto: FedAvg global model + personal models pulled to it by (lambda/2)||v - w||^2 (Li et al. 2021)",
    family="personalised",
    options=DittoOptions,
)
declare(
    "fedrod",
    "raysim.algorithms.fedrod:FedRoD",
    "Fed-RoD: generic model on the balanced softmax loss + a personal linear head (Chen & Chao 2022)",
    family="personalised",
)
declare(
    "fedem",
    "raysim.algorithms.fedem:FedEM",
    "FedEM: K prompt + head components, per-client mixture weights learned by EM (Marfoq et al. 2021)",
    family="personalised",
    options=EMOptions,
)
declare(
    "pfedhn",
    "raysim.algorithms.pfedhn:PFedHN",
    "pFedHN: a server hypernetwork maps client embeddings to personal prompts + head (Shamsian et al. 2021)",
    family="personalised",
    options=HNOptions,
)
declare(
    "pfedpg",
    "raysim.algorithms.pfedpg:PFedPG",
    "pFedPG: a server prompt generator gives each client its prompts; personal heads (Yang et al. 2023)",
    family="personalised",
    options=PGOptions,
)
declare(
    "afl",
    "raysim.algorithms.afl:AFL",
    "Agnostic FL: minimax over a client mixture lambda, projected ascent on the losses (Mohri et al. 2019)",
    family="fairness",
    options=AFLOptions,
)
declare(
    "qffl",
    "raysim.algorithms.qffl:QFFL",
    "q-FFL: q-FedAvg server step weighing clients by loss^q, on prompts + head (Li et al. 2020)",
    family="fairness",
    options=QFFLOptions,
)
declare(
    "term",
    "raysim.algorithms.term:TERM",
    "TERM: client-level tilted aggregation w ~ N_k exp(t F_k), on prompts + head (Li et al. 2021)",
    family="fairness",
    options=TERMOptions,
)
declare(
    "harmofl",
    "raysim.algorithms.harmofl:HarmoFL",
    "HarmoFL: inputs take the global mean Fourier amplitude, SAM-like weight perturbation (Jiang et al. 2022)",
    family="domain",
    options=HarmoOptions,
)
declare(
    "fedgcr",
    "raysim.algorithms.fedgcr:FedGCR",
    "group customisation (GC-Net prompts, l_GC, l_RA) + group reweighting by GMM clusters (AAAI 2024)",
    **FEDGCR,
)
declare(
    "fedgc",
    "raysim.algorithms.fedgcr:FedGC",
    "FedGCR's group customisation alone: GC-Net prompts, l_GC, l_RA, FedAvg aggregation (ablation)",
    **FEDGCR,
)
declare(
    "fedgr",
    "raysim.algorithms.fedgcr:FedGR",
    "FedGCR's group reweighting alone: plain prompts, loss-reweighted aggregation by GMM clusters (ablation)",
    **FEDGCR,
)
declare(
    "fedv",
    "raysim.algorithms.fedv:FedV",
    "split learning: client head/tail, server encoder stepped by the true gradient (FedV)",
    options=SplitOptions,
    fp32_reason=SPLIT_FP32,
    smoke={"fedv": {"fedround": 2}},  # the smoke tests' 3 rounds: heads and tails averaged after rounds 1 and 3
    **SPLIT,
)
declare(
    "fedvz",
    "raysim.algorithms.fedv:FedVZ",
    "split learning with a zeroth-order server: SPSA from two perturbed forwards (FedVZ)",
    options=SPSAOptions,
    fp32_reason="SPSA's loss differences at +-eps perturbations are below bf16's resolution",
    smoke={"fedvz": {"fedround": 2}},
    **SPLIT,
)
declare(
    "festa",
    "raysim.algorithms.festa:Festa",
    "split ViT from random init, server stepped by the true gradient (FESTA-like FedV baseline)",
    options=FestaOptions,
    fp32_reason=SPLIT_FP32,
    smoke={"festa": {"fedround": 2}},
    **SPLIT,
)
declare(
    "fed-dualprompt",
    "raysim.algorithms.fed_dualprompt:FedDualPrompt",
    "DualPrompt with FedAvg: a general prompt + an expert prompt picked per sample by learned keys (FGPT's baseline)",
    family="group prompts",
    options=DualPromptOptions,
)
declare(
    "fgpt",
    "raysim.algorithms.fgpt:FGPT",
    "shared prompt + one group prompt chosen by fixed orthogonal keys, joint training (Deng et al.)",
    family="group prompts",
    options=FGPTOptions,
    metrics=GROUP_METRICS,
    cohort=True,
)
declare(
    "fgpt-u",
    "raysim.algorithms.fgpt:FGPTU",
    "FGPT + inference ensembling the top-K groups' logits, prefix blocks computed once (Deng et al.)",
    family="group prompts",
    options=FGPTOptions,
    options_key="fgpt",
    metrics=GROUP_METRICS,
    cohort=True,
)
declare(
    "sgpt",
    "raysim.algorithms.sgpt:SGPT",
    "shared + group prompts with learned key selection, q_g anti-collapse, BCD and momentum (CVPR 2024)",
    family="group prompts",
    options=SGPTOptions,
    metrics=GROUP_METRICS,
    cohort=True,
)
