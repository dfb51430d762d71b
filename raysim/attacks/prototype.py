"""A FedGCR client's prototype: the image whose type-specific feature is the h_tilde it sent, and the type it shows.

A FedGCR, FedGC or FedGR client sends h_tilde, the class-balanced mean of its rows' type-specific features (FedGCR,
Zheng et al., AAAI 2024, Eq. 4). The server holds the mapping the client used (the frozen backbone, public, and for
GC-Net the weights the client sent beside h_tilde), so it can search the input whose feature is h_tilde, as
smashed-data inversion searches the input of observed features (He, Zhang, Lee, ACSAC 2019, white-box):

    x* = argmin_{x in [lo, hi]}  ||h(x) - h_tilde||^2 / ||h_tilde||^2  +  alpha TV(x)

One image stands for all of the client's rows: a prototype of its data rather than any row. What it shows is scored
in pixels: the type whose mean public image (the test rows of every other client) is nearest to it, right or wrong,
beside the guess of a server that received nothing (the other clients' most common type).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from raysim.algorithms._group_custom import class_token, gc_net
from raysim.attacks import scores
from raysim.attacks.capture import Captured
from raysim.attacks.feature_means import most_common
from raysim.attacks.harness import FEATURE_MEAN, attacker_model, feature_net
from raysim.attacks.smashed import SmashedSettings, invert_smashed
from raysim.core.training import model_inputs

CPU = torch.device("cpu")


@dataclass
class Prototype:
    """One client's prototype (``[H, W, C]`` in [0, 1]), the type nearest to it in pixels, the other clients' most
    common type and the client's own, every type's mean public image, and the search's final loss and seconds."""

    client: int
    image: np.ndarray
    guessed_type: int
    baseline_type: int
    true_type: int
    type_means: dict[int, np.ndarray]
    loss: float
    seconds: float

    @property
    def type_recovered(self) -> bool:
        return self.guessed_type == self.true_type


def type_means(images: np.ndarray, types: np.ndarray) -> dict[int, np.ndarray]:
    """Each type's mean image over ``images`` ``[N, H, W, C]`` whose type is ``types`` ``[N]``, by type."""
    return {int(t): images[types == t].mean(axis=0) for t in np.unique(types)}


def nearest_type(image: np.ndarray, means: dict[int, np.ndarray]) -> int:
    """The type whose mean image is nearest to ``image`` (highest PSNR; ties to the lower type)."""
    closeness = {t: scores.psnr(mean, image) for t, mean in sorted(means.items())}
    return max(closeness, key=lambda t: (closeness[t], -t))


def prototypes(captured: Captured, clients: list[int], settings: SmashedSettings) -> list[Prototype]:
    """For each of ``clients``: the image whose feature, made as the client made its own, is the h_tilde it sent in
    ``captured``'s round, and the type it shows among the mean images of the other clients' test rows. The attacker's
    model is built once and every client's test rows are made pixels once."""
    config, shards = captured.config, captured.shards
    model, _ = attacker_model(config, shards.info.num_classes, None)  # the frozen backbone, as every client holds it
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    size, mean, std = model.input_spec
    tests = [shards.test(c) for c in range(shards.num_clients)]
    pixels = [scores.to_pixels(model_inputs(model, rows.images, CPU), mean, std) for rows in tests]
    types = shards.client_domain
    made = []
    for client in clients:
        update = captured.updates[client]
        weights = feature_net(config, update)

        def feature(x: torch.Tensor, weights=weights) -> torch.Tensor:
            token = class_token(model.vit, x)
            return gc_net(weights, token) if weights is not None else token

        observed = update.extras[FEATURE_MEAN].float()[None]
        inversion = invert_smashed(feature, observed, (len(mean), size, size), scores.model_box(mean, std), settings)
        image = scores.to_pixels(inversion.inputs, mean, std)[0]
        others = [c for c in range(shards.num_clients) if c != client]
        means = type_means(
            np.concatenate([pixels[c] for c in others]), np.concatenate([tests[c].domains for c in others])
        )
        made.append(
            Prototype(
                client,
                image,
                nearest_type(image, means),
                most_common(np.delete(types, client)),
                int(types[client]),
                means,
                inversion.loss,
                inversion.seconds,
            )
        )
    return made
