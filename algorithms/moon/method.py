"""MOON (Li, He, Song, "Model-Contrastive Federated Learning", CVPR 2021; FGPT's "FedMoon", Table 1), on prompts + head.

The local loss adds a model-contrastive term between the representation z of the model being trained, z_glob of
the received global model and z_prev of this client's own model from its previous participation (both frozen):

    l = CE(f(x), y) + mu * l_con,
    l_con = -log exp(cos(z, z_glob)/tau) / (exp(cos(z, z_glob)/tau) + exp(cos(z, z_prev)/tau))

The server takes FedAvg's sample-weighted mean. The previous local prompts are the client's state (the head does not
enter z); on a client's first participation l_con is left out, as the authors' code does while its pool of previous
models is empty. mu = 1, tau = 0.5: the paper's CIFAR-100 values (argparse defaults of ``QinbinLi/MOON``).

Deviation: z is the classifier's input (the pooled, normed class token), not the output of MOON's extra projection
MLP, which sits between the encoder and the classifier in their ResNets; FGPT ran MOON on visual prompts (Sec. 4.2)
without saying which. Each step costs three forwards (local, global, previous) and one backward.
"""

import torch
from torch.func import functional_call

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core import training
from raysim.core.messages import ClientUpdate
from raysim.core.protocol import implements
from raysim.ops.contrastive import ra_loss

HEAD = ("vit.head.weight", "vit.head.bias")


@implements("moon")
class MOON(FedVPT):
    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model, o = ctx.model, self.options
        model.load_trainable(broadcast.params)
        anchors = [
            {k: v.to(ctx.device) for k, v in a.items()} for a in (broadcast.params, client_state) if a is not None
        ]

        def objective(x, y, rows):
            z = model(x, pre_logits=True)
            ce = torch.nn.functional.cross_entropy(model.vit.head(z), y)
            if len(anchors) == 1:
                return ce
            with torch.no_grad():
                z_glob, z_prev = (functional_call(model, a, (x,), {"pre_logits": True}) for a in anchors)
            return ce + o.mu * ra_loss(z, z_glob, z_prev, o.tau, kind="cosine")

        metrics = training.local_train(ctx, data, objective)
        trained = model.trainable_state()
        state = {k: v for k, v in trained.items() if k not in HEAD}
        return ClientUpdate(ctx.client_id, len(data), trained, metrics=metrics, state=state)
