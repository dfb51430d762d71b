"""Inverting Gradients (Geiping, Bauermeister, Dröge, Moeller, "Inverting Gradients - How easy is it to break privacy
in federated learning?", NeurIPS 2020): find the input whose gradient points where the observed one does.

    x* = argmin_{x in [lo, hi]}  1 - <grad L(x, y), g> / (||grad L(x, y)|| ||g||)  +  alpha TV(x)

The cosine distance (over every attacked tensor as one vector) ignores the gradient's magnitude, which depends on
the learning rate and the loss, and keeps its direction, which holds the image (their Section 4); TV is the
anisotropic total variation, the mean absolute difference of neighbouring pixels (their prior for natural images).
The input is optimised with Adam on the gradient's sign (their ``signed`` setting) from Gaussian noise, with the
step divided by 10 at 3/8, 5/8 and 7/8 of the iterations, and kept in the data's range after every step (``boxed``).
The labels are known to the attacker (:mod:`.labels` recovers them from the gradient itself).

``refine`` > 0 then minimises the cosine distance alone (the prior has chosen the basin; the observation's own minimum
is the input) from where the search ended, by L-BFGS (as Deep Leakage from Gradients, Zhu et al., NeurIPS 2019) in
float64 for at most ``refine`` iterations: near the input the cosine distance falls below float32's resolution while
the image still moves (on DLG's LeNet, from about 18 dB to about 30). On the offline default's ViT the search ends in
a local minimum, which the refinement does not leave (docs/how-to/attacks.md); :mod:`.analytic` solves a full
fine-tuning update in closed form.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from raysim.attacks.progress import steps
from raysim.core.messages import Tensors
from raysim.engine.cohort import unfused_attention


@dataclass(frozen=True)
class InvertingSettings:
    """The attack's budget and prior: Adam's ``iterations`` and step ``lr``, the weight ``tv`` of total variation,
    the ``seed`` of the initial noise, and the most L-BFGS iterations of the float64 refinement (``refine``, 0:
    none)."""

    iterations: int = 1500
    lr: float = 0.1
    tv: float = 1e-2
    seed: int = 0
    refine: int = 0


def cosine_distance(dummy: list[torch.Tensor], observed: list[torch.Tensor]) -> torch.Tensor:
    """1 - cos(dummy, observed), each list of tensors taken as one vector."""
    dot = sum((a * b).sum() for a, b in zip(dummy, observed))
    norms = torch.sqrt(sum(a.pow(2).sum() for a in dummy)) * torch.sqrt(sum(b.pow(2).sum() for b in observed))
    return 1 - dot / norms


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of horizontally plus of vertically neighbouring pixels of ``x`` ``[B, C, H, W]``."""
    return (x[..., :, 1:] - x[..., :, :-1]).abs().mean() + (x[..., 1:, :] - x[..., :-1, :]).abs().mean()


def attack_loss(model, observed: Tensors, x: torch.Tensor, labels: torch.Tensor, tv: float) -> torch.Tensor:
    """The cosine distance between the gradient of cross-entropy at ``(x, labels)`` and ``observed`` (the tensors it
    names, of ``model``'s parameters), plus ``tv`` times the total variation of ``x``; differentiable in ``x``."""
    params = dict(model.named_parameters())
    names = list(observed)
    loss = F.cross_entropy(model(x), labels)
    dummy = torch.autograd.grad(loss, [params[name] for name in names], create_graph=True)
    return cosine_distance(list(dummy), [observed[name] for name in names]) + tv * total_variation(x)


@dataclass
class Inversion:
    """The reconstructed inputs (the model's input space), the attack loss at the end, and the seconds it took."""

    inputs: torch.Tensor
    loss: float
    seconds: float


def invert(
    model,
    observed: Tensors,
    labels: torch.Tensor,
    box: tuple[torch.Tensor, torch.Tensor],
    settings: InvertingSettings = InvertingSettings(),
) -> Inversion:
    """Reconstruct ``len(labels)`` inputs of ``model`` from the ``observed`` gradient. ``box``: the lowest and highest
    value of each channel (``[1, C, 1, 1]``), where real inputs lie; the image side is the model's."""
    return search(model, observed, partial(attack_loss, model, observed, labels=labels), len(labels), box, settings)


def search(model, attacked: Tensors, loss_of, rows: int, box: tuple[torch.Tensor, torch.Tensor], settings) -> Inversion:
    """Inverting Gradients' search: ``rows`` inputs of ``model`` from Gaussian noise, Adam on the sign of the gradient
    of ``loss_of(x, tv=settings.tv)`` with the step divided by 10 at 3/8, 5/8 and 7/8 of the iterations, kept in
    ``box`` after every step, then :func:`refined` (``settings.refine`` > 0); the tensors named in ``attacked`` are
    those ``loss_of`` differentiates (the others stay frozen)."""
    start = time.perf_counter()
    size = model.input_spec[0]
    low, high = box
    noise = torch.Generator().manual_seed(settings.seed)
    x = torch.randn(rows, low.shape[1], size, size, generator=noise).clamp(low, high).requires_grad_(True)
    optimizer = torch.optim.Adam([x], lr=settings.lr)
    iterations = settings.iterations
    milestones = [iterations * 3 // 8, iterations * 5 // 8, iterations * 7 // 8]
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
    for p in model.parameters():
        p.requires_grad_(False)
    named = dict(model.named_parameters())
    for name in attacked:
        named[name].requires_grad_(True)
    model.train()  # as the client trained
    loss = torch.tensor(float("nan"))
    with unfused_attention(model):  # the fused kernel has no second derivative
        with steps("Inverting Gradients' search: iteration", iterations) as step:
            for _ in range(iterations):
                optimizer.zero_grad(set_to_none=True)
                loss = loss_of(x, tv=settings.tv)
                (x.grad,) = torch.autograd.grad(loss, [x])
                x.grad.sign_()
                optimizer.step()
                schedule.step()
                with torch.no_grad():
                    x.copy_(torch.maximum(torch.minimum(x, high), low))
                step()
        found = x.detach()
        if settings.refine:
            found, loss = refined(model, loss_of, found, box, settings.refine)
    return Inversion(found, float(loss.detach()), time.perf_counter() - start)


def refined(model, loss_of, x: torch.Tensor, box: tuple[torch.Tensor, torch.Tensor], iterations: int):
    """(x', loss_of(x', tv=0)): ``x`` moved by L-BFGS with a strong-Wolfe line search on ``loss_of(clamp(x), tv=0)``,
    the data term alone, for at most ``iterations`` iterations, in float64 (``model`` is back in its own dtype
    after); x' is clamped to ``box``, in ``x``'s dtype."""
    dtype = next(model.parameters()).dtype
    low, high = (bound.double() for bound in box)
    z = x.double().requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [z],
        max_iter=iterations,
        history_size=100,
        tolerance_grad=1e-15,
        tolerance_change=1e-18,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(torch.maximum(torch.minimum(z, high), low), tv=0.0)
        (z.grad,) = torch.autograd.grad(loss, [z])
        step()
        return loss

    model.double()
    try:
        with steps("L-BFGS in float64, until it converges: evaluation", None) as step:
            optimizer.step(closure)
        found = torch.maximum(torch.minimum(z.detach(), high), low)
        loss = loss_of(found, tv=0.0)
    finally:
        model.to(dtype)
    return found.to(x.dtype), loss
