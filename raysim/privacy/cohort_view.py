"""What the server's step sees of a round under ``privacy.*``: with user-level DP, one noised mean of the cohort's
clipped messages (DP-FedAvg, McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR
2018); with secure aggregation alone, the round's updates only when enough of them arrived, since a method that may
run so aggregates through weighted sums the server could compute from the masked inputs
(:attr:`~raysim.core.protocol.Method.each_update`).

User-level DP, a round: every client's message is its update Delta_i (the tensors it trained minus those it
received; a tier's untrained rows are zero) and each extra the method bounds
(:meth:`~raysim.core.protocol.SendsExtras.bounded_extra`); each channel is clipped to its share s_j of C (the
update's share is 1), so the message's L2 sensitivity is S = C sqrt(sum_j s_j^2); the server adds N(0, z^2 S^2) to
every coordinate of the sum and divides by the expected cohort size m (fixed, so the sensitivity of the mean stays
S / m whoever drops out). The method's own step then runs on that one mean, as one client of weight 1: its
parameters are the received ones plus the noised mean update. Every client weighs the same, as in DP-FedAvg.

Adaptive clipping (Andrew et al., NeurIPS 2021): the same round releases how many clients' update norms were at most
C, as a sum of centred bits b_i - 1/2 (sensitivity 1/2) noised with N(0, sigma_b^2); the unclipped share is that
over m, plus 1/2, and C moves geometrically towards the target quantile. The pair is one
Gaussian mechanism of noise multiplier z when the update's is z_update = (z^-2 - (2 sigma_b)^-2)^(-1/2)
(:func:`~raysim.privacy.accounting.split_noise`). C lives in the run's history (``privacy_clip``), so a resumed run
continues it; the noise is drawn from (run seed, round), so a resumed run draws the same.

Distributed DP (``privacy.noise_by=clients``, under secure aggregation): the server recovers only the survivors' sum,
so the noise must be in it already. Each client adds N(0, (z S)^2 / t) to its clipped message, t =
``privacy.min_survivors``, and the sum of the n >= t survivors carries N(0, (z S)^2 n / t): at least the central
noise, exactly it when n = t, so the central mechanism's accounting holds against the server too (Kairouz, Liu,
Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021, with
the continuous Gaussian); the price is sqrt(n / t) times the noise. The count of adaptive clipping is noised the same
way. A sum of independent Gaussians is one Gaussian, so the view draws it once, scaled by sqrt(n / t).
"""

from __future__ import annotations

import math

import torch

from raysim.base.seeding import Purpose, derive_seed
from raysim.core.messages import ClientUpdate, GlobalState, Tensors
from raysim.core.protocol import SendsExtras
from raysim.privacy import calibration
from raysim.privacy.mechanisms import clipped, gaussian, next_clip

VIEW_CLIENT = -1  # the client id of the cohort's mean as the method's step receives it


class CohortView:
    """The server's view of a round under the run's privacy settings."""

    def __init__(self, config, method):
        p, fed = config.privacy, config.federation
        self.privacy, self.seed, self.method = p, fed.seed, method
        self.user = p.mode == "user"
        self.cohort = fed.clients_per_round  # m, the expected cohort size the noised sum is divided by
        self.shares = dict(method.private_extras) if self.user and isinstance(method, SendsExtras) else {}
        self.unsent = {name for name, share in self.shares.items() if share == 0}
        self.count_std = calibration.count_noise(config)
        self.update_noise = calibration.update_noise(config) if self.user else 0.0
        self.guaranteed = p.min_survivors if p.noise_by == "clients" else None  # t: whom the clients' noise counts on

    def as_sent(self, update: ClientUpdate) -> ClientUpdate:
        """``update`` as its client sends it: without the extras it does not send under user-level DP (a share of
        0), which the traffic then does not carry and the step gets as zeros (:meth:`view`)."""
        if self.unsent:
            update.extras = {name: t for name, t in update.extras.items() if name not in self.unsent}
        return update

    def view(
        self, round: int, state: GlobalState, updates: list[ClientUpdate], clip: float
    ) -> tuple[list[ClientUpdate], dict[str, float]]:
        """The updates the method's step gets this round, and the round's privacy metrics."""
        if self.privacy.secure_aggregation and len(updates) < self.privacy.min_survivors:
            kept = {"privacy_clip": clip, "privacy_next_clip": clip} if self.count_std else {}  # C stays, resumably
            return [], {"secagg_lost": 1.0, **kept}
        if not self.user:
            return updates, {}
        return self._private_mean(round, state, updates, clip)

    def _private_mean(self, round, state, updates, clip) -> tuple[list[ClientUpdate], dict[str, float]]:
        generator = torch.Generator().manual_seed(derive_seed(self.seed, Purpose.PRIVACY, round))
        params = state.params
        total: Tensors = {name: torch.zeros(t.shape, dtype=torch.float64) for name, t in params.items()}
        declared = self.method.uplink_extras(state) if self.shares else {}
        sent = {name: share for name, share in self.shares.items() if name not in self.unsent}
        extras: Tensors = {name: torch.zeros(declared[name], dtype=torch.float64) for name in sent}
        unclipped = 0
        for update in updates:
            delta = {name: update.params[name].double() - params[name].double() for name in params}
            bounded, norm = clipped(delta, clip)
            unclipped += norm <= clip
            for name, t in bounded.items():
                total[name] += t
            for name, share in sent.items():
                if name in update.extras:
                    part, _ = clipped({name: self.method.bounded_extra(name, update.extras[name])}, share * clip)
                    extras[name] += part[name]
        sensitivity = clip * math.sqrt(1 + sum(s * s for s in sent.values()))
        excess = math.sqrt(len(updates) / self.guaranteed) if self.guaranteed else 1.0  # distributed: n / t shares
        noise = gaussian(
            {**total, **{f"extra:{k}": v for k, v in extras.items()}},
            self.update_noise * sensitivity * excess,
            generator,
        )
        mean = {
            name: (params[name].double() + (total[name] + noise[name]) / self.cohort).to(params[name].dtype)
            for name in params
        }
        received = {name: ((v + noise[f"extra:{name}"]) / self.cohort).float() for name, v in extras.items()}
        received |= {name: torch.zeros(declared[name]) for name in self.shares if name not in sent}
        metrics = {"privacy_clip": clip}
        if self.count_std:  # centred bits b_i - 1/2, as TF Privacy's quantile estimator: their sum's sensitivity is 1/2
            centred = unclipped - len(updates) / 2
            share = (
                centred + float(torch.randn((), generator=generator, dtype=torch.float64)) * self.count_std * excess
            ) / self.cohort + 0.5
            p = self.privacy
            metrics["privacy_unclipped_share"] = share  # as released (noised)
            metrics["privacy_next_clip"] = next_clip(clip, share, p.adaptive, p.clip_lr)
        return [ClientUpdate(VIEW_CLIENT, 1, mean, received)], metrics
