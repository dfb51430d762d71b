"""Every method's options, one frozen dataclass each (the config section ``MethodInfo.options_key``), every option
declared once with :func:`~raysim.base.settings.setting`: its default, help, valid values and checks, as config keys
are. Torch-free, so that the config is built, and its mistakes reported, before torch is imported. The methods'
modules read them as ``self.options``; ``raysim ls options METHOD`` and the documentation's reference print them."""

from __future__ import annotations

from dataclasses import dataclass

from raysim.base.prompts import POOLINGS
from raysim.base.settings import Settings, at_least, in_range, non_negative, positive, setting

LAMBDA_STEPS = ("ascent", "one-step")  # afl.lambda_step
CLIENT_LOSSES = ("local", "global")  # fedgcr.client_loss: L_ij from Algorithm 1's local loss or the authors' code
COVARIANCES = ("full", "tied", "diag", "spherical")  # fedgcr.covariance: the GMM's (scikit-learn's names)
CLIENT_INITS = ("random", "pretrained")  # fedv.client_init: where the heads and tails start
QUERIES = ("plain", "relu")  # fgpt.query
LAYER_READINGS = ("paper", "code")  # how a select_layer number is read: see _group_prompts.query_depth
BLOCKS = "list of 0-based block indices"


@dataclass(frozen=True)
class PromptOptions(Settings):
    """Prompt length and head pooling, shared by the prompt-tuning baselines (VPT, Jia et al., ECCV 2022)."""

    prompt_length: int = setting(
        10, "Prompt tokens entering before the first block (VPT-shallow).", checks=(at_least(1),)
    )
    head_pooling: str = setting(
        "backbone",
        "What the classifier head reads: the backbone's own pooling, the class token, or the mean of the class token "
        "and the prompt outputs.",
        choices=POOLINGS,
    )


@dataclass(frozen=True)
class AFLOptions(PromptOptions):
    """Agnostic FL (Mohri et al., ICML 2019): the mixture lambda over clients and how it moves."""

    lambda_lr: float = setting(
        0.1,
        "Step size of the ascent on the client mixture lambda.",
        checks=(non_negative("0 keeps the uniform mixture"),),
    )
    lambda_step: str = setting(
        "ascent",
        "'ascent': the paper's projected ascent on a running lambda; 'one-step': lambda = Proj(omega + lr F) afresh "
        "each round from the data shares omega (FedGCR's code).",
        choices=LAMBDA_STEPS,
    )


@dataclass(frozen=True)
class DittoOptions(Settings):
    """Ditto (Li et al., ICML 2021): the pull of the personal models to the global one."""

    lam: float = setting(
        0.75,
        "lambda of the proximal term (lambda/2)||v - w||^2 pulling each personal model v to the global model w.",
        checks=(non_negative("0 trains the personal models alone"),),
    )


@dataclass(frozen=True)
class DualPromptOptions(Settings):
    """Fed-DualPrompt (DualPrompt, Wang et al., ECCV 2022, with FedAvg); empty block lists mean DualPrompt's blocks
    (G: 0-1, E: 2-4 of 12) scaled to the backbone's depth."""

    pool: int = setting(10, "Expert prompts in the pool (E-prompts, each with a learned key).", checks=(at_least(1),))
    general_length: int = setting(
        5, "Tokens of the general prompt (G-prompt) at each of its blocks.", checks=(at_least(1),)
    )
    expert_length: int = setting(5, "Tokens of an expert prompt at each of its blocks.", checks=(at_least(1),))
    general_blocks: tuple = setting((), f"Blocks the G-prompt enters ({BLOCKS}; empty: DualPrompt's 0-1 of 12 scaled).")
    expert_blocks: tuple = setting((), f"Blocks the E-prompt enters ({BLOCKS}; empty: DualPrompt's 2-4 of 12 scaled).")
    pull: float = setting(
        1.0,
        "lambda of the key-matching loss lambda (1 - cos(q(x), k_s(x))) that pulls the chosen key to the query.",
        checks=(non_negative(),),
    )


@dataclass(frozen=True)
class EMOptions(PromptOptions):
    """FedEM (Marfoq et al., NeurIPS 2021): the number of mixture components."""

    components: int = setting(
        3, "Mixture components K: prompt + head sets mixed per client by EM.", checks=(at_least(1),)
    )


@dataclass(frozen=True)
class FedGCROptions(Settings):
    """FedGCR (Zheng et al., AAAI 2024), shared by its ablations ``fedgc`` and ``fedgr``; defaults are the paper's.
    Its authors' FedGR is ``reweighting=code`` with ``client_loss=global``."""

    prompts: int = setting(
        4, "Global prompts n (tokens before block 0, each customised by GC-Net).", checks=(at_least(1),)
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
    tau: float = setting(0.5, "tau, the temperature of l_RA's similarities.", checks=(positive(),))
    contrast: str = setting(
        "paper",
        "l_RA as the paper (temperature tau) or as the authors' code (cosine similarities, no temperature; pair it "
        "with smaller lambdas, about 0.05-0.1).",
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


@dataclass(frozen=True)
class FedMixOptions(PromptOptions):
    """FedMix (Yoon et al., ICLR 2021): the mixup weight."""

    lam: float = setting(
        0.05,
        "lambda, the weight of the shared means in the approximated mixup loss.",
        checks=(in_range(0, 1, open_high=True, why="0 is FedVPT"),),
    )


@dataclass(frozen=True)
class PROptions(PromptOptions):
    """FedPR (Feng et al., CVPR 2023): the null space that prompt updates are projected on."""

    ratio: float = setting(
        0.8,
        "Share of the prompt's D directions that updates may use: the null space keeps the D (1 - ratio) smallest.",
        checks=(in_range(0, 1, open_low=True),),
    )
    normalise: bool = setting(True, "Divide the projector by its Frobenius norm (the authors' code).")


@dataclass(frozen=True)
class ProxOptions(PromptOptions):
    """FedProx (Li et al., MLSys 2020): the proximal term's weight."""

    mu: float = setting(
        0.01,
        "mu of the proximal term (mu/2)||w - w_global||^2 over the trained tensors.",
        checks=(non_negative("0 is plain FedAvg"),),
    )


@dataclass(frozen=True)
class SAMOptions(PromptOptions):
    """FedSAM (Qu et al., ICML 2022): the sharpness-aware step's radius."""

    rho: float = setting(0.05, "rho, the radius of SAM's ascent step.", checks=(non_negative("0 is FedVPT"),))


@dataclass(frozen=True)
class SplitOptions(Settings):
    """Split learning (FedV/FedVZ, "Heterogeneous Federated Learning with Splited Language Model"): where the model is
    cut, how heads and tails start and how often they are averaged, the server's step size."""

    head_blocks: int = setting(
        0,
        "Blocks kept on the client before the server's (0: the head is the patch embedding).",
        checks=(non_negative("blocks kept on the client"),),
    )
    tail_blocks: int = setting(
        0,
        "Blocks kept on the client after the server's (0: the tail is the final norm and the classifier).",
        checks=(non_negative("blocks kept on the client"),),
    )
    fedround: int = setting(
        20,
        "Heads and tails are averaged when (round - 1) % fedround == 0 (Algorithm 1, line 20); between, each client "
        "keeps its own.",
        checks=(at_least(1),),
    )
    lr_server: float = setting(
        1e-6, "Learning rate of the server's encoder.", checks=(non_negative("0 freezes the encoder"),)
    )
    lr_decay: float = setting(
        0.5,
        "Factor lr_server is multiplied by every decay_every rounds.",
        checks=(in_range(0, 1, open_low=True, why="1 keeps lr_server constant"),),
    )
    decay_every: int = setting(100, "Rounds between two lr_decay steps.", checks=(at_least(1),))
    client_init: str = setting(
        "random",
        "Where the clients' heads and tails start: each its own random draw (Algorithm 1, line 1) or the pretrained "
        "weights.",
        choices=CLIENT_INITS,
    )


@dataclass(frozen=True)
class SPSAOptions(SplitOptions):
    """FedVZ: FedV whose server step is an SPSA estimate from two perturbed forwards."""

    eps: float = setting(
        1e-4,
        "The SPSA perturbation scale of the server's zeroth-order estimate.",
        checks=(positive("the SPSA perturbation scale, e.g. 1e-4"),),
    )


@dataclass(frozen=True)
class FestaOptions(SplitOptions):
    """FESTA: FedV's split trained from a random encoder, with a larger server step."""

    lr_server: float = setting(
        1e-3, "Learning rate of the server's encoder.", checks=(non_negative("0 freezes the encoder"),)
    )


@dataclass(frozen=True)
class FGPTOptions(Settings):
    """FGPT and FGPT-U (Deng, Thrampoulidis, Li, "Heterogeneous Federated Learning with Group-Aware Prompt
    Tuning")."""

    groups: int = setting(10, "G, the number of group prompts and fixed keys.", checks=(at_least(1),))
    shared_length: int = setting(
        5, "Tokens of the shared prompt before the first block.", checks=(non_negative("0: no shared prompts"),)
    )
    group_block: int = setting(
        -1,
        "0-based block the group prompt enters before (-1: the paper's layer 6 of 12 scaled to the backbone).",
        checks=(at_least(-1, "-1: the paper's layer scaled to the backbone"),),
    )
    keys: str = setting(
        "orthogonal",
        "The fixed keys b_g: orthogonal (the paper) or random (its ablation).",
        choices=("orthogonal", "random"),
    )
    query: str = setting(
        "plain",
        "q(x) in Select(x) = argmax_g cos(q(x), b_g): the frozen class token itself (Eq. 5) or after a ReLU (SGPT's "
        "authors' code).",
        choices=QUERIES,
    )
    k: int = setting(5, "FGPT-U's K: the top-K groups whose logits are averaged at inference.", checks=(at_least(1),))
    select_layer: int = setting(
        0, "The block whose class token is the selection query q(x) (0: the last).", checks=(non_negative(),)
    )
    select_layer_as: str = setting(
        "paper",
        "How select_layer L is read: 'paper', the class token after block L (Eq. 2-3); 'code', blocks 0..L then the "
        "final norm (SGPT's authors' code).",
        choices=LAYER_READINGS,
    )


@dataclass(frozen=True)
class HarmoOptions(PromptOptions):
    """HarmoFL (Jiang, Wang, Dou, AAAI 2022): weight perturbation and amplitude normalisation."""

    alpha: float = setting(
        0.05,
        "alpha, the radius of the weight perturbation at each local step.",
        checks=(non_negative("0: no weight perturbation"),),
    )
    window: float = setting(
        0.5,
        "Half-width, as a share of the image side, of the low-frequency window whose amplitude takes the global mean.",
        checks=(in_range(0, 0.5, why="0: the DC term, 0.5: the whole amplitude"),),
    )


@dataclass(frozen=True)
class MOONOptions(PromptOptions):
    """MOON (Li, He, Song, CVPR 2021): the model-contrastive term."""

    mu: float = setting(
        1.0, "mu, the weight of the model-contrastive loss l_con.", checks=(non_negative("0 is FedVPT"),)
    )
    tau: float = setting(0.5, "tau, the temperature of l_con's cosine similarities.", checks=(positive(),))


@dataclass(frozen=True)
class HNOptions(PromptOptions):
    """pFedHN (Shamsian et al., ICML 2021): the server hypernetwork and its optimiser (SGD)."""

    embed_dim: int = setting(
        -1,
        "Size e of each client's learned embedding v_i (-1: 1 + clients / 4, the paper's).",
        checks=((lambda v: v >= 1 or v == -1, "must be at least 1 (-1: 1 + clients / 4)"),),
    )
    hidden: int = setting(100, "Width of the hypernetwork's hidden layers.", checks=(at_least(1),))
    hidden_layers: int = setting(3, "Hidden layers of the hypernetwork after its first.", checks=(non_negative(),))
    hn_lr: float = setting(1e-2, "Learning rate of the hypernetwork and the embeddings.", checks=(positive(),))
    hn_momentum: float = setting(
        0.9, "SGD momentum of the hypernetwork's optimiser.", checks=(in_range(0, 1, open_high=True),)
    )
    hn_weight_decay: float = setting(1e-3, "Weight decay of the hypernetwork's optimiser.", checks=(non_negative(),))
    clip: float = setting(50.0, "Gradient-norm clip of the hypernetwork's step.", checks=(positive(),))


@dataclass(frozen=True)
class PGOptions(PromptOptions):
    """pFedPG (Yang, Wang, Wang, ICCV 2023): the server's prompt generator."""

    server_lr: float = setting(1e-3, "Adam learning rate of the server's prompt generator.", checks=(positive(),))
    heads: int = setting(
        0, "Attention heads of the generator's attention.", checks=(non_negative("0: the backbone's attention heads"),)
    )


@dataclass(frozen=True)
class QFFLOptions(PromptOptions):
    """q-FFL (Li, Sanjabi, Beirami, Smith, ICLR 2020): the q-FedAvg server step."""

    q: float = setting(
        1.0,
        "q, the fairness exponent: clients weigh by F_k^q.",
        checks=(non_negative("0 is FedAvg: the data-weighted average of the clients' models"),),
    )
    lipschitz: float = setting(
        0.0,
        "L, the Lipschitz constant that turns a model change into a gradient (0: 1 / train.lr, the paper's with SGD).",
        checks=(non_negative("0 = 1 / train.lr"),),
    )


@dataclass(frozen=True)
class SGPTOptions(Settings):
    """SGPT (Deng et al., CVPR 2024); empty block lists mean the paper's layout scaled to the backbone's depth. Where
    the authors' code (github.com/ubc-tea/SGPT) differs from the paper, an option selects it; the defaults are the
    paper's."""

    groups: int = setting(10, "G, the number of group prompts and learned keys.", checks=(at_least(1),))
    shared_blocks: tuple = setting(
        (), f"U_S, the blocks shared prompts enter ({BLOCKS}; empty: the paper's 1-3 of 12)."
    )
    group_blocks: tuple = setting((), f"U_G, the blocks group prompts enter ({BLOCKS}; empty: the paper's 4-6 of 12).")
    select_layer: int = setting(
        0, "The block whose frozen class token is the selection query q(x) (0: the last).", checks=(non_negative(),)
    )
    bcd: str = setting(
        "bcd",
        "Local training: block coordinate descent (Block I shared prompts + head, then Block II group prompts + keys "
        "+ head), the inverse order, or both blocks jointly (Table 3).",
        choices=("joint", "bcd", "bcd-inv"),
    )
    prompts: str = setting(
        "both", "Which prompts train: shared, group or both (Table 4).", choices=("shared", "group", "both")
    )
    key_rule: str = setting(
        "qg",
        "Selection in training: the q_g-calibrated rule against collapse, or plain argmax cos(q(x), k_g).",
        choices=("plain", "qg"),
    )
    eps: float = setting(5e-4, "eps of the q_g-calibrated selection (Sec. 5.1).", checks=(non_negative(),))
    momentum: bool = setting(True, "Server momentum on keys and group prompts (Eq. 7).")
    alpha_k: float = setting(
        0.5, "alpha_k, the keys' momentum.", checks=(in_range(0, 1, open_high=True, why="0 turns momentum off"),)
    )
    alpha_g: float = setting(
        0.5,
        "alpha_g, the group prompts' momentum.",
        checks=(in_range(0, 1, open_high=True, why="0 turns momentum off"),),
    )
    head_pooling: str = setting(
        "cls+group",
        "What the head reads: the class token, or the mean of the class token and the group prompts' outputs.",
        choices=("cls", "cls+group"),
    )
    key_fallback_at_most: int = setting(
        0,
        "Keys of a group chosen at most this many times in a round (sum_i N_g^i) take the plain mean 1/m instead of "
        "N_g^i / sum_i N_g^i (0: only groups nobody chose, the paper; 50: the authors' code).",
        checks=(non_negative("0: the paper; 50: the authors' code"),),
    )
    select_layer_as: str = setting(
        "paper",
        "How select_layer L is read: 'paper', the class token after block L (Sec. 2.2); 'code', blocks 0..L then the "
        "final norm.",
        choices=LAYER_READINGS,
    )
    select_per: str = setting(
        "sample",
        "Selection in training per sample (Eq. 5-6), or per batch: every sample takes the batch's most frequent group "
        "(the authors' code on Office and DomainNet). Inference selects per sample.",
        choices=("sample", "batch"),
    )
    shared_length: int = setting(
        1,
        "Tokens of the shared prompt (the paper's prompt length).",
        checks=(at_least(1, "no shared prompts: prompts=group"),),
    )
    shared_length_at: str = setting(
        "every",
        "Which blocks of U_S get shared_length tokens: every one, or the first only, the later ones 1 (the authors' "
        "code).",
        choices=("every", "first"),
    )
    shared_init: str = setting(
        "zeros",
        "How shared prompts start: zeros (the authors' code) or VPT's Xavier range.",
        choices=("zeros", "xavier"),
    )


@dataclass(frozen=True)
class TERMOptions(PromptOptions):
    """TERM (Li, Beirami, Sanjabi, Smith, ICLR 2021) with a client-level tilt."""

    tilt: float = setting(
        0.1,
        "t, the tilt of the server's weights omega_k exp(t F_k): > 0 favours high-loss clients, < 0 down-weighs them, "
        "0 is FedAvg.",
    )
