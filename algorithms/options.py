"""Every method's options, one frozen dataclass each (the config section ``MethodInfo.options_key``), with the values
they accept: torch-free, so that the config is built, and its mistakes reported, before torch is imported (and
``raysim run`` starts Ray that much sooner). The methods' modules read them as ``self.options``."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.core.errors import ConfigError
from raysim.core.prompts import POOLINGS

LAMBDA_STEPS = ("ascent", "one-step")  # afl.lambda_step
CLIENT_LOSSES = ("local", "global")  # fedgcr.client_loss: L_ij from Algorithm 1's local loss or the authors' code
COVARIANCES = ("full", "tied", "diag", "spherical")  # fedgcr.covariance: the GMM's (scikit-learn's names)
CLIENT_INITS = ("random", "pretrained")  # fedv.client_init: where the heads and tails start
QUERIES = ("plain", "relu")  # fgpt.query
LAYER_READINGS = ("paper", "code")  # how a select_layer number is read: see _group_prompts.query_depth


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _one_of(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"sgpt.{name}={value!r} is not one of {', '.join(valid)}")


@dataclass(frozen=True)
class PromptOptions:
    """Prompt length and head pooling, shared by the prompt-tuning baselines."""

    prompt_length: int = 10
    head_pooling: str = "backbone"

    def __post_init__(self):
        if self.prompt_length < 1:
            raise ConfigError(f"prompt_length={self.prompt_length} must be at least 1")
        if self.head_pooling not in POOLINGS:
            raise ConfigError(f"head_pooling={self.head_pooling!r} is not one of {', '.join(POOLINGS)}")


@dataclass(frozen=True)
class AFLOptions(PromptOptions):
    lambda_lr: float = 0.1
    lambda_step: str = "ascent"

    def __post_init__(self):
        super().__post_init__()
        if self.lambda_lr < 0:
            raise ConfigError(f"afl.lambda_lr={self.lambda_lr} must be >= 0 (0 keeps the uniform mixture)")
        if self.lambda_step not in LAMBDA_STEPS:
            raise ConfigError(f"afl.lambda_step={self.lambda_step!r} is not one of {', '.join(LAMBDA_STEPS)}")


@dataclass(frozen=True)
class DittoOptions:
    lam: float = 0.75

    def __post_init__(self):
        if self.lam < 0:
            raise ConfigError(f"ditto.lam={self.lam} must be >= 0 (0 trains the personal models alone)")


@dataclass(frozen=True)
class DualPromptOptions:
    """Empty block tuples mean DualPrompt's blocks (G: 0-1, E: 2-4 of 12) scaled to the backbone's depth."""

    pool: int = 10
    general_length: int = 5
    expert_length: int = 5
    general_blocks: tuple = ()
    expert_blocks: tuple = ()
    pull: float = 1.0

    def __post_init__(self):
        for key in ("pool", "general_length", "expert_length"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}={getattr(self, key)} must be at least 1")
        if self.pull < 0:
            raise ConfigError(f"pull={self.pull} must be >= 0 (lambda of the key-matching loss)")


@dataclass(frozen=True)
class EMOptions(PromptOptions):
    components: int = 3

    def __post_init__(self):
        super().__post_init__()
        if self.components < 1:
            raise ConfigError(f"components={self.components} must be at least 1 (the number of components K)")


@dataclass(frozen=True)
class FedGCROptions:
    """FedGCR's options; defaults are the paper's (lambda1 0.5, lambda2 0.1, tau 0.5, delta 0.5, gamma 0.5, q 1).

    ``contrast="code"``: cosine similarities, no temperature in l_RA (pair it with the authors' smaller lambdas,
    about 0.05-0.1); ``reweighting="code"``: the authors' FedGR (see :func:`raysim.ops.reweighting.fedgr_weights`),
    with beta fixed at ``delta`` (their "base"); ``client_loss``: L_ij, ``local`` (Algorithm 1) or ``global`` (the
    authors' code; see the module docstring). Their FedGR is ``reweighting="code"`` with ``client_loss="global"``.
    """

    prompts: int = 4
    clusters: int = 5
    lambda1: float = 0.5
    lambda2: float = 0.1
    tau: float = 0.5
    contrast: str = "paper"
    delta: float = 0.5
    gamma: float = 0.5
    q: float = 1.0
    reweighting: str = "paper"
    client_loss: str = "local"
    covariance: str = "full"

    def __post_init__(self):
        if self.prompts < 1:
            raise ConfigError(f"fedgcr.prompts={self.prompts} must be at least 1 (the number of global prompts)")
        if self.clusters < 1:
            raise ConfigError(f"fedgcr.clusters={self.clusters} must be at least 1 (T', the number of clusters)")
        for name in ("delta", "gamma"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(
                    f"fedgcr.{name}={getattr(self, name)} must be in [0, 1] (beta = delta (1 - gamma^(r-1)) "
                    f"must stay in [0, 1])"
                )
        if self.q < 0:
            raise ConfigError(f"fedgcr.q={self.q} must be >= 0")
        if self.tau <= 0 or self.lambda1 < 0 or self.lambda2 < 0:
            raise ConfigError("fedgcr.tau must be > 0 and fedgcr.lambda1, fedgcr.lambda2 >= 0")
        for name, value, valid in (
            ("contrast", self.contrast, ("paper", "code")),
            ("reweighting", self.reweighting, ("paper", "code")),
            ("client_loss", self.client_loss, CLIENT_LOSSES),
            ("covariance", self.covariance, COVARIANCES),
        ):
            if value not in valid:
                raise ConfigError(f"fedgcr.{name}={value!r} is not one of {', '.join(valid)}")


@dataclass(frozen=True)
class FedMixOptions(PromptOptions):
    lam: float = 0.05

    def __post_init__(self):
        super().__post_init__()
        if not 0 <= self.lam < 1:
            raise ConfigError(f"lam={self.lam} must be in [0, 1) (0 is FedVPT)")


@dataclass(frozen=True)
class PROptions(PromptOptions):
    ratio: float = 0.8
    normalise: bool = True

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.ratio <= 1:
            raise ConfigError(f"ratio={self.ratio} must be in (0, 1] (the share of directions updates may use)")


@dataclass(frozen=True)
class ProxOptions(PromptOptions):
    mu: float = 0.01

    def __post_init__(self):
        super().__post_init__()
        if self.mu < 0:
            raise ConfigError(f"fedprox.mu={self.mu} must be >= 0 (0 is plain FedAvg)")


@dataclass(frozen=True)
class SAMOptions(PromptOptions):
    rho: float = 0.05

    def __post_init__(self):
        super().__post_init__()
        if self.rho < 0:
            raise ConfigError(f"rho={self.rho} must be >= 0 (0 is FedVPT)")


@dataclass(frozen=True)
class SplitOptions:
    """Where the model is cut, how heads and tails start and how often they are averaged, the server's step size."""

    head_blocks: int = 0
    tail_blocks: int = 0
    fedround: int = 20
    lr_server: float = 1e-6
    lr_decay: float = 0.5
    decay_every: int = 100
    client_init: str = "random"

    def __post_init__(self):
        _check(
            self.head_blocks >= 0 and self.tail_blocks >= 0,
            f"head_blocks={self.head_blocks} and tail_blocks={self.tail_blocks} must be >= 0 "
            "(blocks kept on the client)",
        )
        _check(self.fedround >= 1, f"fedround={self.fedround} must be at least 1 (rounds between head/tail averaging)")
        _check(self.lr_server >= 0, f"lr_server={self.lr_server} must be >= 0 (0 freezes the encoder)")
        _check(0 < self.lr_decay <= 1, f"lr_decay={self.lr_decay} must be in (0, 1] (1 keeps lr_server constant)")
        _check(self.decay_every >= 1, f"decay_every={self.decay_every} must be at least 1 (rounds per lr_decay)")
        _check(
            self.client_init in CLIENT_INITS,
            f"client_init={self.client_init!r} is not one of {', '.join(CLIENT_INITS)} (how heads and tails start)",
        )


@dataclass(frozen=True)
class SPSAOptions(SplitOptions):
    """FedVZ adds the perturbation scale eps of its zeroth-order estimate."""

    eps: float = 1e-4

    def __post_init__(self):
        super().__post_init__()
        _check(self.eps > 0, f"eps={self.eps} must be > 0 (the SPSA perturbation scale, e.g. 1e-4)")


@dataclass(frozen=True)
class FestaOptions(SplitOptions):
    lr_server: float = 1e-3


@dataclass(frozen=True)
class FGPTOptions:
    """FGPT's options; ``group_block`` (0-based) -1 means the paper's layer 6 of 12 scaled to the backbone."""

    groups: int = 10
    shared_length: int = 5
    group_block: int = -1
    keys: str = "orthogonal"
    # q(x) in Select(x) = argmax_g cos(q(x), b_g): "plain", the class token itself (FGPT Eq. 5 and the line below it:
    # "the cls token output from the pre-trained foundation model"); "relu", ReLU first, as the SGPT authors' code.
    query: str = "plain"
    k: int = 5
    select_layer: int = 0
    # "paper": the class token after block select_layer (FGPT Eq. 2-3: cls_u is L_u's output); "code": the SGPT
    # authors' reading, blocks[:L + 1] then the final norm (see _group_prompts.query_depth). Same for 0 (the last).
    select_layer_as: str = "paper"

    def __post_init__(self):
        if self.groups < 1:
            raise ConfigError(f"fgpt.groups={self.groups} must be at least 1 (the number of groups G)")
        if self.k < 1:
            raise ConfigError(f"fgpt.k={self.k} must be at least 1 (top-K groups at inference)")
        if self.shared_length < 0:
            raise ConfigError(f"fgpt.shared_length={self.shared_length} must be >= 0 (0: no shared prompts)")
        if self.keys not in ("orthogonal", "random"):
            raise ConfigError(f"fgpt.keys={self.keys!r} is not one of orthogonal, random")
        if self.query not in QUERIES:
            raise ConfigError(f"fgpt.query={self.query!r} is not one of {', '.join(QUERIES)}")
        if self.select_layer < 0:
            raise ConfigError("fgpt.select_layer must be >= 0 (0 = the last block)")
        if self.select_layer_as not in LAYER_READINGS:
            raise ConfigError(f"fgpt.select_layer_as={self.select_layer_as!r} is not one of paper, code")


@dataclass(frozen=True)
class HarmoOptions(PromptOptions):
    alpha: float = 0.05
    window: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        if self.alpha < 0:
            raise ConfigError(f"alpha={self.alpha} must be >= 0 (0: no weight perturbation)")
        if not 0 <= self.window <= 0.5:
            raise ConfigError(f"window={self.window} must be in [0, 0.5] (0: the DC term, 0.5: the whole amplitude)")


@dataclass(frozen=True)
class MOONOptions(PromptOptions):
    mu: float = 1.0
    tau: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        if self.mu < 0:
            raise ConfigError(f"mu={self.mu} must be >= 0 (0 is FedVPT)")
        if self.tau <= 0:
            raise ConfigError(f"tau={self.tau} must be > 0")


@dataclass(frozen=True)
class HNOptions(PromptOptions):
    embed_dim: int = -1
    hidden: int = 100
    hidden_layers: int = 3
    hn_lr: float = 1e-2
    hn_momentum: float = 0.9
    hn_weight_decay: float = 1e-3
    clip: float = 50.0

    def __post_init__(self):
        super().__post_init__()
        for key, ok, need in (
            ("embed_dim", self.embed_dim >= 1 or self.embed_dim == -1, "at least 1 (-1: 1 + clients / 4)"),
            ("hidden", self.hidden >= 1, "at least 1"),
            ("hidden_layers", self.hidden_layers >= 0, ">= 0"),
            ("hn_lr", self.hn_lr > 0, "> 0"),
            ("hn_momentum", 0 <= self.hn_momentum < 1, "in [0, 1)"),
            ("hn_weight_decay", self.hn_weight_decay >= 0, ">= 0"),
            ("clip", self.clip > 0, "> 0"),
        ):
            if not ok:
                raise ConfigError(f"{key}={getattr(self, key)} must be {need}")


@dataclass(frozen=True)
class PGOptions(PromptOptions):
    server_lr: float = 1e-3
    heads: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.server_lr <= 0:
            raise ConfigError(f"server_lr={self.server_lr} must be > 0")
        if self.heads < 0:
            raise ConfigError(f"heads={self.heads} must be >= 0 (0: the backbone's attention heads)")


@dataclass(frozen=True)
class QFFLOptions(PromptOptions):
    q: float = 1.0
    lipschitz: float = 0.0  # 0: 1 / train.lr (the paper's with SGD; FedGCR's comparison's with AdamW)

    def __post_init__(self):
        super().__post_init__()
        if self.q < 0:
            raise ConfigError(
                f"qffl.q={self.q} must be >= 0 (0 is FedAvg: the data-weighted average of the clients' models)"
            )
        if self.lipschitz < 0:
            raise ConfigError(f"qffl.lipschitz={self.lipschitz} must be >= 0 (0 = 1 / train.lr)")


@dataclass(frozen=True)
class SGPTOptions:
    """SGPT's options; empty block tuples mean the paper's layout scaled to the backbone's depth.

    Fidelity options (paper default, the authors' code as the alternative):
        key_fallback_at_most: keys of a group whose round total sum_i N_g^i is <= this are averaged with the plain
            1/m instead of N_g^i / sum_i N_g^i. 0 (default): only groups nobody chose, which Alg. 2 l. 13 leaves
            undefined (the paper has no threshold); 50: the authors' ``utils.py:224`` (``<= 50``).
        select_layer_as: "paper" (default): ``select_layer`` L is cls_L, the class token after block L (Sec. 2.2,
            Sec. 5.1's "5-th layer"), with the final norm only after the last block; "code": blocks[:L + 1] then the
            final norm (``models/vit_models_pr.py:396-410``). See :func:`_group_prompts.query_depth`.
        select_per: "sample" (default): Select(x) per sample (Eq. 5-6); "batch": in training every sample of a batch
            takes the batch's most frequent selection (``models/vit_models_pr.py:441-445``, their Office/DomainNet
            runs), which N_g^i and L_key then count. Inference stays per sample, as in their code (l. 453-460).
        shared_length: tokens of the shared prompt (the paper's "prompt length", 1, Sec. 5.1; their ``--n_prompt``).
        shared_length_at: "every" (default): each block of U_S gets ``shared_length`` tokens, as VPT's length;
            "first": only the first block of U_S, the later ones 1 token (``models/vit_models_pr.py:294-296``).
        shared_init: "zeros" (default, ``models/vit_models_pr.py:294``; the paper does not say) or "xavier":
            VPT's uniform range (Sec. 3.1 follows VPT), as their group prompts (l. 292, 303).
    """

    groups: int = 10
    shared_blocks: tuple = ()
    group_blocks: tuple = ()
    select_layer: int = 0
    bcd: str = "bcd"
    prompts: str = "both"
    key_rule: str = "qg"
    eps: float = 5e-4  # Sec. 5.1's eps in the q_g-calibrated selection
    momentum: bool = True
    alpha_k: float = 0.5
    alpha_g: float = 0.5
    head_pooling: str = "cls+group"
    key_fallback_at_most: int = 0
    select_layer_as: str = "paper"
    select_per: str = "sample"
    shared_length: int = 1
    shared_length_at: str = "every"
    shared_init: str = "zeros"

    def __post_init__(self):
        if self.groups < 1:
            raise ConfigError(f"sgpt.groups={self.groups} must be at least 1 (the number of groups G)")
        _one_of("bcd", self.bcd, ("joint", "bcd", "bcd-inv"))
        _one_of("prompts", self.prompts, ("shared", "group", "both"))
        _one_of("key_rule", self.key_rule, ("plain", "qg"))
        _one_of("head_pooling", self.head_pooling, ("cls", "cls+group"))
        _one_of("select_layer_as", self.select_layer_as, LAYER_READINGS)
        _one_of("select_per", self.select_per, ("sample", "batch"))
        _one_of("shared_length_at", self.shared_length_at, ("every", "first"))
        _one_of("shared_init", self.shared_init, ("zeros", "xavier"))
        if self.shared_length < 1:
            raise ConfigError(
                f"sgpt.shared_length={self.shared_length} must be at least 1 (no shared prompts: prompts=group)"
            )
        if self.key_fallback_at_most < 0:
            raise ConfigError(
                f"sgpt.key_fallback_at_most={self.key_fallback_at_most} must be >= 0 "
                "(0: the paper; 50: the authors' code)"
            )
        if not (0 <= self.alpha_k < 1 and 0 <= self.alpha_g < 1):
            raise ConfigError("sgpt.alpha_k and sgpt.alpha_g must be in [0, 1) (0 turns momentum off)")
        if self.eps < 0 or self.select_layer < 0:
            raise ConfigError("sgpt.eps and sgpt.select_layer must be >= 0 (select_layer 0 = the last block)")


@dataclass(frozen=True)
class TERMOptions(PromptOptions):
    tilt: float = 0.1
