"""Split learning's server and the client's view of it (FedV/FedVZ, "Heterogeneous Federated Learning with
Splited Language Model"), shared by ``fedv``, ``fedvz`` and ``festa``.

The model is cut in three: the client's head (patch embedding and ``head_blocks`` blocks), the server's encoder
(the blocks between) and the client's tail (``tail_blocks`` blocks, final norm, classifier). On a client, the
encoder is a :class:`RemoteEncoder` module: its forward sends the smashed features to the server and its
backward sends the gradient with respect to the server's output and receives the gradient with respect to the
smashed features, so the client trains with an ordinary ``loss.backward()``. :func:`random_head_and_tail` draws
a client's own head and tail.

:class:`EncoderServer` is the server (pure torch), a service the engine starts: in-process for the sequential
backend, as a Ray actor otherwise. Its weights change only between rounds, so the clients' requests of a round
are served concurrently and every client sees the same encoder, whichever order they arrive in.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass

import torch
from torch import nn

from raysim.algorithms._declarations import SPLIT_TRAFFIC
from raysim.base.memory import reuse_freed_memory
from raysim.core.messages import Tensors
from raysim.core.protocol import ENCODER_PREFIX as PREFIX
from raysim.ops.spsa import perturbed_forward, spsa_step

KINDS = SPLIT_TRAFFIC  # what crosses the cut, counted each way per client
HEAD_AND_TAIL = ("patch_embed", "norm_pre", "norm", "fc_norm", "head")  # the client's modules outside the blocks


@dataclass(frozen=True)
class ServerSegment:
    """The encoder blocks the server owns, as a recipe (the run's config and its number of classes): built where the
    server runs, so the process that starts the server (the coordinator) imports no model code (timm)."""

    config: object
    num_classes: int

    def build(self) -> nn.ModuleList:
        """The model built as every client builds it, and the server's blocks cut out of it."""
        from raysim.core.registry import get_method
        from raysim.models.factory import build_model

        method = get_method(self.config.method).cls(self.config)
        model = build_model(self.config, method, self.num_classes)
        return model.offload(*method.server_segment(len(model.vit.blocks)), nn.Identity())


class EncoderServer:
    """The server side of split learning: owns the encoder blocks and serves forward, backward and SPSA requests.

    Thread-safe: requests of concurrent clients only read the weights; :meth:`step_gradient` and
    :meth:`step_spsa` write them between rounds. Gradients of the encoder's weights are computed only for FedV's
    update, from the (smashed features, output gradient) pair each client's last local step left here, in client
    order, so the update does not depend on which client arrived first.
    """

    def __init__(
        self, blocks: nn.ModuleList | ServerSegment, device: torch.device | None = None, threads: int | None = None
    ):
        """``blocks``: the encoder, or the recipe it is built from by the first :meth:`load`; ``device``: default a
        GPU when the recipe's run gives the server one (``resources.server_gpus``), else the CPU; ``threads``: torch's
        CPU threads in this process (as a client worker has, so the numbers match the sequential run)."""
        if threads:
            torch.set_num_threads(threads)
        reuse_freed_memory()  # the blocks' activations from the heap the last request freed, not fresh pages
        from raysim.models.factory import pick_device  # timm: in the server, not where methods are looked up

        self._segment = blocks if isinstance(blocks, ServerSegment) else None
        self.device = device or pick_device(self._segment.config.resources.server_gpus if self._segment else 0.0)
        self.blocks = None
        if self._segment is None:
            self._place(blocks)
        self._graphs: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()
        self._compute_s = 0.0
        self._in_flight = self._peak = 0

    def _start(self) -> float:
        with self._lock:
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
        return time.perf_counter()

    def _timed(self, started: float) -> float:
        spent = time.perf_counter() - started
        with self._lock:
            self._compute_s += spent
            self._in_flight -= 1
        return spent

    def forward(self, key: tuple | None, h: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The encoder's output for smashed features ``h`` and the seconds spent; with a ``key`` the graph is
        kept for :meth:`backward` under that key."""
        started = self._start()
        h = h.to(self.device)
        if key is None:
            with torch.no_grad():
                out = self._run(h)
        else:
            h = h.detach().requires_grad_(True)
            with torch.enable_grad():
                out = self._run(h)
            with self._lock:
                self._graphs[key] = (h, out)
        return out.detach().cpu(), self._timed(started)

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    def backward(self, key: tuple, grad_out: torch.Tensor, keep_for: int | None = None) -> tuple[torch.Tensor, float]:
        """dL/dh for the forward kept under ``key`` given dL/d(output); ``keep_for`` (a client id) keeps this
        step's (h, dL/d(output)) as that client's last step for :meth:`step_gradient`."""
        started = self._start()
        with self._lock:
            h, out = self._graphs.pop(key)
        grad_out = grad_out.to(self.device)
        (grad_h,) = torch.autograd.grad(out, h, grad_out)
        if keep_for is not None:
            with self._lock:
                self._kept[keep_for] = (h.detach(), grad_out)
        return grad_h.cpu(), self._timed(started)

    def perturbed(self, h: torch.Tensor, seed: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, float]:
        """The outputs at w + eps z and w - eps z (z from ``seed``), for the client's two SPSA losses."""
        started = self._start()
        h = h.to(self.device)
        plus = perturbed_forward(self.blocks, h, seed, eps)
        minus = perturbed_forward(self.blocks, h, seed, -eps)
        return plus.cpu(), minus.cpu(), self._timed(started)

    def step_gradient(self, clients: list[int], lr: float) -> float:
        """FedV: w <- w - (lr / m) * sum_i dL_i/dw over the m clients' kept last steps (in the given order);
        returns the seconds spent."""
        started = self._start()
        params = list(self.blocks.parameters())
        with self._lock:
            kept = [self._kept.pop(c) for c in clients if c in self._kept]
            self._kept.clear()
        total = [torch.zeros_like(p) for p in params]
        for h, grad_out in kept:
            with torch.enable_grad():
                grads = torch.autograd.grad(self._run(h), params, grad_out)
            for acc, grad in zip(total, grads):
                acc.add_(grad)
        if kept:
            with torch.no_grad():
                for param, acc in zip(params, total):
                    param.sub_(acc, alpha=lr / len(kept))
        return self._timed(started)

    def step_spsa(self, estimates: list[tuple[int, float]], lr: float) -> float:
        """FedVZ: :func:`spsa_step` with the clients' (seed, coefficient) pairs; returns the seconds spent."""
        started = self._start()
        spsa_step(self.blocks, estimates, lr)
        return self._timed(started)

    def end_round(self) -> tuple[float, int]:
        """Seconds of compute and the most requests served at once since the last call; drops graphs a failed
        client left behind."""
        with self._lock:
            spent, peak, self._compute_s, self._peak = self._compute_s, self._peak, 0.0, 0
            self._graphs.clear()
        return spent, peak

    def state(self) -> Tensors:
        """The encoder's weights as ``encoder.<block>.<name>`` (CPU copies, for checkpoints and the final state)."""
        return {PREFIX + name: p.detach().cpu().clone() for name, p in self.blocks.named_parameters()}

    def _place(self, blocks: nn.ModuleList) -> None:
        self.blocks = blocks.to(self.device).eval()
        self.blocks.requires_grad_(True)

    def build(self) -> None:
        """Build the blocks of a server started from their recipe (once): a model the server's node cannot build (a
        weights file missing there) is this call's :class:`~raysim.base.errors.ConfigError`, one line, not the death
        of the server's actor."""
        if self.blocks is None:
            self._place(self._segment.build())

    def load(self, state: Tensors) -> None:
        """Copy ``encoder.*`` tensors (as from :meth:`state`) into the encoder (built first if :meth:`build` was not
        called)."""
        self.build()
        with torch.no_grad():
            for name, param in self.blocks.named_parameters():
                param.copy_(state[PREFIX + name])


class _ThroughServer(torch.autograd.Function):
    """Autograd across the cut: forward and backward are requests to the server."""

    @staticmethod
    def forward(ctx, h, remote):
        ctx.remote, ctx.key = remote, remote.next_key()
        return remote.call("forward", ctx.key, h.detach(), sent=h)

    @staticmethod
    def backward(ctx, grad_out):
        remote = ctx.remote
        keep = remote.client if remote.keep_next_backward else None
        remote.keep_next_backward = False
        return remote.call("backward", ctx.key, grad_out.contiguous(), keep, sent=grad_out), None


class RemoteEncoder(nn.Module):
    """Stands in for the server's blocks on a client: requests to ``server`` (an :class:`EncoderServer` or a
    handle with its methods), counting the bytes each way (``bytes_{up,down}_{kind}``) and the seconds spent
    waiting and computing on the server.

    The client's method sets ``client`` before training and may set ``keep_next_backward`` before its last
    local step (FedV: that step's gradient is the server's update).
    """

    def __init__(self, server):
        super().__init__()
        self.server = server
        self.client = -1
        self.keep_next_backward = False
        self._step = 0
        self.counters = self._zero()

    @staticmethod
    def _zero() -> dict[str, float]:
        counters = {f"bytes_{way}_{kind}": 0.0 for way in ("up", "down") for kind in KINDS}
        return {**counters, "server_wait_s": 0.0, "server_compute_s": 0.0}

    def begin(self, client: int) -> None:
        """Start serving ``client`` (its requests are keyed by its id) with fresh counters."""
        self.client, self._step, self.keep_next_backward = client, 0, False
        self.counters = self._zero()

    def next_key(self) -> tuple[int, int]:
        self._step += 1
        return (self.client, self._step)

    def call(self, name: str, *args, sent: torch.Tensor) -> torch.Tensor:
        """One request; counts ``sent`` and the reply as activations (forward) or gradients (backward)."""
        started = time.perf_counter()
        reply, compute_s = getattr(self.server, name)(*args)
        kind = "activations" if name == "forward" else "gradients"
        self.counters[f"bytes_up_{kind}"] += _nbytes(sent)
        self.counters[f"bytes_down_{kind}"] += _nbytes(reply)
        self.counters["server_wait_s"] += time.perf_counter() - started
        self.counters["server_compute_s"] += compute_s
        return reply.to(sent.device)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and h.requires_grad:
            return _ThroughServer.apply(h, self)
        return self.call("forward", None, h.detach(), sent=h)

    def perturbed(self, h: torch.Tensor, seed: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The server's outputs at w +- eps z for ``h`` (FedVZ's last step), counted as SPSA traffic: the two outputs
        down; ``h`` is the smashed batch the step's own forward sends up, which the server keeps for these passes."""
        started = time.perf_counter()
        plus, minus, compute_s = self.server.perturbed(h.detach(), seed, eps)
        self.counters["bytes_down_spsa"] += _nbytes(plus) + _nbytes(minus)
        self.counters["server_wait_s"] += time.perf_counter() - started
        self.counters["server_compute_s"] += compute_s
        return plus.to(h.device), minus.to(h.device)


def remote_encoder(model: nn.Module) -> RemoteEncoder:
    """The :class:`RemoteEncoder` inside a client's model."""
    return next(m for m in model.modules() if isinstance(m, RemoteEncoder))


def _nbytes(tensor: torch.Tensor) -> float:
    return float(tensor.numel() * tensor.element_size())


def random_head_and_tail(vit: nn.Module, seed: int) -> Tensors:
    """A randomly initialised head and tail (FedV Algorithm 1 line 1) for ``vit``, as ``vit.<name>`` tensors.

    The embedding stage (patch embedding, class and position tokens) and the final norm and classifier get timm's
    own ViT initialisation (``VisionTransformer.init_weights``, default mode): position embedding truncated normal
    (to [-2, 2]) with std 0.02, class token N(0, 1e-6), linear layers truncated normal with std 0.02 and zero bias,
    the patch embedding's convolution and the norms their ``reset_parameters``. Drawn on the CPU from ``seed`` (the same
    numbers on any device); blocks kept on the client keep their weights, and ``vit`` is left untouched.
    """
    fresh: Tensors = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.default_generator.manual_seed(seed)  # CPU only, like the backbone's own initialisation
        for name, std in (("pos_embed", 0.02), ("cls_token", 1e-6), ("reg_token", 1e-6)):
            token = getattr(vit, name, None)
            if token is not None:
                draw = nn.init.trunc_normal_ if name == "pos_embed" else nn.init.normal_
                fresh[f"vit.{name}"] = draw(torch.empty(token.shape), std=std)
        for name in HEAD_AND_TAIL:
            module = copy.deepcopy(getattr(vit, name)).cpu()
            module.apply(_timm_init)
            fresh.update({f"vit.{name}.{key}": p.detach() for key, p in module.named_parameters()})
    return fresh


def _timm_init(module: nn.Module) -> None:
    """timm's ``init_weights_vit_timm`` for one module."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif hasattr(module, "reset_parameters"):
        module.reset_parameters()
