"""TERM (Li, Beirami, Sanjabi, Smith, "Tilted Empirical Risk Minimization", ICLR 2021) with a client-level
tilt, on prompts + head: the server averages with w_k ~ omega_k * exp(t * F_k), the gradient weights of the
tilted objective (1/t) log sum_k omega_k exp(t F_k), F_k the received model's loss on client k's train rows.
t > 0 favours high-loss clients (fairness), t < 0 down-weighs them (robustness), t = 0 is FedAvg. A FedGCR
baseline (Table 1).

``tilt`` defaults to 0.1, the tilt of TERM's own fair federated learning experiment (litian96/TERM
fair_flearn/run.sh:7, main.py:108-111); FedGCR's comparison used 0.01 (their utils/util.py:1107), which its
settings should set. TERM's own federated code (fair_flearn/flearn/trainers/tilting.py) normalises the exponentials
by a running average over rounds and averages the models with a further 1/m, where raysim normalises within the
round (t = 0 is then FedAvg exactly); it samples clients by data size where raysim samples uniformly and weighs by
omega_k: the two agree in expectation."""

from raysim.algorithms._fairness import ReportsGlobalLoss, client_losses, with_data
from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core.messages import GlobalState
from raysim.core.protocol import implements
from raysim.ops.aggregate import weighted_mean
from raysim.ops.reweighting import tilted_weights


@implements("term")
class TERM(ReportsGlobalLoss, FedVPT):
    def aggregate(self, round, state, updates):
        updates = with_data(updates)
        weights = tilted_weights(client_losses(updates), [u.num_samples for u in updates], self.options.tilt)
        return GlobalState(params=weighted_mean([u.params for u in updates], weights), server=state.server)
