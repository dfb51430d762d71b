"""A split baseline in the spirit of FESTA (Park et al., 2021, "Federated Split Vision Transformer for COVID-19
CXR Diagnosis using Task-Agnostic Training"), as the FedV paper compares against it: the split ViT of
:mod:`raysim.algorithms.fedv` trained without the pretrained encoder, i.e. from random initialisation.

Deviations: FESTA's server steps the transformer body after every client batch; here it steps once per round
from each client's last local step (FedV's protocol), since per-batch steps from concurrent clients would make
the result depend on the order their requests arrive in. Its default server learning rate is 1e-3, as a body
trained from scratch does not move at FedV's 1e-6.
"""

from __future__ import annotations

import torch

from raysim.algorithms.fedv.method import FedV
from raysim.core.protocol import implements


@implements("festa")
class Festa(FedV):
    def init_global(self, model, generator):
        """FedV's split of a backbone re-initialised with timm's own scheme, seeded from the run seed."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
            model.vit.init_weights()
        return super().init_global(model, generator)
