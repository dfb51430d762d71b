"""The learned inverse network of smashed-data inversion (He, Zhang, Lee, "Model inversion attacks against
collaborative inference", ACSAC 2019, Section 5, the black-box attack).

The attacker passes public inputs through the client head it assumes, trains a network to map those features back
to the inputs, and applies it to the features the server received. Unlike the search (:mod:`raysim.attacks.smashed`)
it needs no gradient of the head, only the head's outputs on public data, and once trained it reconstructs a row with
one forward.

He et al. train a deconvolutional network; on a vision transformer's tokens the network here decodes each patch
token on its own (:class:`PatchDecoder`: a learned offset per position, LayerNorm, Linear(D, hidden), GELU,
Linear(hidden, C p^2), the patch's pixels, folded back into the image; the prefix and prompt tokens ahead of the
patches are dropped). With the head the patch embedding alone (``head_blocks=0``) a token is W x_p + b + pos_p, an
affine map of its patch whose offset depends on the position, which the per-position offset lets one decoder undo;
deeper heads mix the tokens, which it approximates from each token's residual stream. Trained by Adam on the mean
squared error in the model's input space, over shuffled batches of the public features.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from raysim.attacks.analytic import fold_patches
from raysim.attacks.inverting import Inversion
from raysim.attacks.progress import steps
from raysim.attacks.smashed import feature_distance


@dataclass(frozen=True)
class InverseSettings:
    """The network's training: ``epochs`` over at most ``public_rows`` public rows in batches of ``batch_size``,
    Adam's step ``lr``, the decoder's ``hidden`` width, the ``seed`` of its initialisation and batch order."""

    public_rows: int = 4096
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    hidden: int = 512
    seed: int = 0


class PatchDecoder(nn.Module):
    """Tokens ``[B, T, D]`` to images ``[B, C, H, W]``: the last ``grid[0] * grid[1]`` tokens (the patches, in
    row-major order), each plus its position's learned offset, decoded to its ``patch`` x ``patch`` pixels of
    ``channels`` channels."""

    def __init__(self, width: int, channels: int, patch: int, grid: tuple[int, int], hidden: int):
        super().__init__()
        self.channels, self.patch, self.grid = channels, patch, grid
        self.position = nn.Parameter(torch.zeros(grid[0] * grid[1], width))
        self.net = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, channels * patch * patch)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        rows, columns = self.grid
        patches = self.net(tokens[:, -rows * columns :] + self.position)
        return fold_patches(patches, self.channels, self.patch, self.grid)


def invert_by_network(
    head: Callable[[torch.Tensor], torch.Tensor],
    observed: torch.Tensor,
    public: torch.Tensor,
    patch: int,
    box: tuple[torch.Tensor, torch.Tensor],
    settings: InverseSettings = InverseSettings(),
) -> Inversion:
    """Reconstruct the ``len(observed)`` inputs whose features through ``head`` are ``observed`` ``[B, T, D]`` by a
    :class:`PatchDecoder` trained on ``public`` inputs ``[N, C, H, W]`` (the model's input space) and their
    features; ``box``: the lowest and highest value of each channel (``[1, C, 1, 1]``). The loss is the search's
    (:func:`~raysim.attacks.smashed.feature_distance` of the reconstruction's features to the observed ones)."""
    start = time.perf_counter()
    with torch.no_grad():
        features = torch.cat([head(batch) for batch in public.split(256)])
    channels, height, width = public.shape[1:]
    generator = torch.Generator().manual_seed(settings.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        decoder = PatchDecoder(features.shape[-1], channels, patch, (height // patch, width // patch), settings.hidden)
    optimizer = torch.optim.Adam(decoder.parameters(), lr=settings.lr)
    with steps("inverse network: epoch", settings.epochs) as step:
        for _ in range(settings.epochs):
            for rows in torch.randperm(len(public), generator=generator).split(settings.batch_size):
                optimizer.zero_grad(set_to_none=True)
                (decoder(features[rows]) - public[rows]).pow(2).mean().backward()
                optimizer.step()
            step()
    low, high = box
    with torch.no_grad():
        inputs = torch.maximum(torch.minimum(decoder(observed), high), low)
        loss = float(feature_distance(head(inputs), observed))
    return Inversion(inputs, loss, time.perf_counter() - start)
