"""q-FFL (Li, Sanjabi, Beirami, Smith, "Fair Resource Allocation in Federated Learning", ICLR 2020) on prompts +
head: the q-FedAvg server step, which weighs clients by F_k^q so that clients with a higher loss count more.
F_k is the received global model's loss on the client's train rows; each client also counts with its data share
(q = 0 is FedAvg). A FedGCR baseline (Table 1).

L (``qffl.lipschitz``; 0 derives it): q-FedAvg trains locally with SGD of step size 1/L and turns the model change
into a gradient with L (Algorithm 2; fair_flearn flearn/trainers/qffedavg.py:13, 57, 62 use L = 1 / the SGD
learning rate, plain gradient descent), so with ``train.optimizer=sgd`` and ``train.momentum=0`` L is 1 / train.lr.
Momentum (SGD's default 0.9 here) lengthens the local steps, and another optimiser (AdamW, the default) has no such
step: L is then a free constant, and 0 takes 1 / train.lr all the same, which is what FedGCR's comparison ran
(their utils/util.py:1068 fixes lr = 0.001, their AdamW's): a choice, not an estimate, so the q-FFL space tunes
it. The run records the L it used (``resolved_options``)."""

from dataclasses import replace

from raysim.algorithms._fairness import ReportsGlobalLoss, client_losses, with_data
from raysim.algorithms.fedvpt.method import FedVPT
from raysim.algorithms.qffl import QFFLOptions
from raysim.core.messages import GlobalState
from raysim.core.protocol import ResolvesOptions, implements
from raysim.ops.reweighting import qffl_step


@implements("qffl")
class QFFL(ReportsGlobalLoss, ResolvesOptions, FedVPT):
    @property
    def lipschitz(self) -> float:
        """L: ``qffl.lipschitz``, or 1 / train.lr."""
        return self.options.lipschitz or 1.0 / self.config.train.lr

    def resolved_options(self, depth: int) -> QFFLOptions:
        return replace(self.options, lipschitz=self.lipschitz)

    def aggregate(self, round, state, updates):
        updates = with_data(updates)
        params = qffl_step(
            state.params,
            [u.params for u in updates],
            client_losses(updates),
            [u.num_samples for u in updates],
            self.options.q,
            self.lipschitz,
        )
        return GlobalState(params=params, server=state.server)
