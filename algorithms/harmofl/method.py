"""HarmoFL (Jiang, Wang, Dou, "HarmoFL: Harmonizing Local and Global Drifts in Federated Learning on Heterogeneous
Medical Images", AAAI 2022), a FedGCR baseline (Tables 1-2), on prompts + head.

Local drift, amplitude normalisation: an image x in pixel space ([0, 1], as the authors' inputs: the backbone's
input un-normalised, worked on, normalised again) keeps the phase P of its Fourier transform and takes the global
mean amplitude A_g, x_hat = Re F^-1(A' exp(j P(x))), A' = A_g inside a centred low-frequency
window of half-width floor(window * side) and |F(x)| outside. A client's statistic is its mean amplitude over its
training rows; the global one is their N_i-weighted mean, formed at the first aggregation and then fixed (the
authors' ``fix_amp``); until then a client normalises with its own. Training and inference both see x_hat.

Global drift, weight perturbation: each local step is SAM with radius alpha on the trained tensors (the authors'
``WPOptim``: ascend by alpha g / ||g||, take the gradient there, restore, base step). Server: FedAvg, N_i / N.

The amplitude travels as the parameter ``extra.amplitude`` (C x H x W, never trained): a client's own the first
time, the global one afterwards, and back, as the authors' code averages ``running_amp`` with the state dict every
round (the paper shares it once); so clients are evaluated with it. Defaults: alpha = 0.05 (the authors' and
FedGCR's code); window 0.5, the whole amplitude as the paper describes. The authors' (and FedGCR's) ``amp_utils``
use L = 0, only the DC term, i.e. each channel's mean intensity (the FedGCR presets use it), and their running
amplitude is the first batch's mean (a float momentum passed as a C int), where here it is over all rows.
"""

from functools import partial

import torch

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core import training
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.protocol import ModelParts, implements
from raysim.ops.fourier import amplitude, normalise_amplitude
from raysim.ops.sam import sam_step

AMP = "extra.amplitude"


def _channel_stats(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The backbone's per-channel input mean and std, shaped [C, 1, 1] on ``x``'s device and dtype."""
    _, mean, std = model.input_spec
    return tuple(torch.tensor(v, dtype=x.dtype, device=x.device).view(-1, 1, 1) for v in (mean, std))


def to_pixels(model, x: torch.Tensor) -> torch.Tensor:
    """The backbone's normalised input back in [0, 1] (x * std + mean per channel)."""
    mean, std = _channel_stats(model, x)
    return x * std + mean


def to_input(model, pixels: torch.Tensor) -> torch.Tensor:
    """[0, 1] pixels as the backbone's input ((p - mean) / std per channel)."""
    mean, std = _channel_stats(model, pixels)
    return (pixels - mean) / std


def own_amplitude(model, data, device) -> torch.Tensor:
    """A client's amplitude statistic: the mean over its rows of |F(x)| in pixel space."""
    return training.mean_input(model, data, device, lambda x: amplitude(to_pixels(model, x)))


@implements("harmofl")
class HarmoFL(FedVPT):
    record_dp = "its clients send their data's mean amplitude and take a weight-perturbed step, neither DP-SGD's"
    user_dp = "its clients send their data's mean amplitude, unbounded, which clipping with the update would drown"
    set_once = "the amplitude, the first cohort's mean of the clients' amplitudes"

    def parts(self, vit, generator) -> ModelParts:
        from raysim.models.backbones import input_spec  # timm: where a model is built, not where methods are looked up

        side = input_spec(vit)[0]
        amp = torch.nn.Parameter(torch.zeros(vit.in_chans, side, side))  # communicated, never trained
        return ModelParts(super().parts(vit, generator).spec, {"amplitude": amp})

    def normalised(self, model, x: torch.Tensor) -> torch.Tensor:
        """The backbone's input ``x`` with the amplitude swapped in pixel space: on the mean-subtracted input the DC
        term's phase is the sign of each channel's mean, so the swap would give every image +-|mean| instead of
        the one global mean intensity."""
        amp = model.extra["amplitude"].detach()
        return to_input(model, normalise_amplitude(to_pixels(model, x), amp, self.options.window))

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model = ctx.model
        model.load_trainable(broadcast.params)
        if not broadcast.params[AMP].any() and len(data):  # no global amplitude yet: the client's own
            with torch.no_grad():
                model.extra["amplitude"].copy_(own_amplitude(model, data, ctx.device))
        step = partial(sam_step, radius=self.options.alpha)
        with model.training_only(set(model.trainable_names()) - {AMP}):
            metrics = training.local_train(
                ctx,
                data,
                lambda x, y, rows: self.loss(model, model(self.normalised(model, x)), y, broadcast),
                step=step,
            )
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), metrics=metrics)

    def predict(self, model, x, data, rows):
        return model(self.normalised(model, x))

    def aggregate(self, round, state, updates) -> GlobalState:
        """FedAvg; the amplitude is the clients' weighted mean once, then stays."""
        new = super().aggregate(round, state, updates)
        if state.params[AMP].any():
            new.params[AMP] = state.params[AMP]
        return new
