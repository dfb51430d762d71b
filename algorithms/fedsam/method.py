"""FedSAM (Qu, Li, Duan, Liu, Tang, Lu, "Generalized Federated Learning via Sharpness Aware Minimization", ICML
2022), a FedGCR baseline (Tables 1-2), on prompts + head.

Each local step is SAM (Foret et al., ICLR 2021) on the trained tensors w, over all of them together:

    g = grad l(w; xi);  eps = rho g / (||g||_2 + 1e-12);  w <- BaseStep(w, grad l(w + eps; xi))

with the run's optimiser as the base (fresh every round, as FedGCR's code re-creates it); the server takes FedAvg's
sample-weighted mean (Qu et al.'s Alg. 1 with server step 1). rho = 0.05: FedGCR's code (``utils/sam.py``'s default,
base Adam, lr 0.01); Qu et al.'s own rho was not checked against the paper. Two forwards and backwards per step.
"""

from functools import partial

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core import training
from raysim.core.messages import ClientUpdate
from raysim.core.protocol import implements
from raysim.ops.sam import sam_step


@implements("fedsam")
class FedSAM(FedVPT):
    record_dp = "its local step is sharpness-aware (two passes), not the plain step DP-SGD replaces"

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        ctx.model.load_trainable(broadcast.params)
        step = partial(sam_step, radius=self.options.rho)
        metrics = training.local_train(
            ctx, data, lambda x, y, rows: self.loss(ctx.model, ctx.model(x), y, broadcast), step=step
        )
        return ClientUpdate(ctx.client_id, len(data), ctx.model.trainable_state(), metrics=metrics)
