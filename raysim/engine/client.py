"""The client side of a simulation: one process's model, running any number of virtual clients one by one.

A :class:`ClientRuntime` is the Ray ``ClientWorker`` (``ray.remote`` of this class) or, for the sequential
backend, an object in the driver. It builds the frozen model once; a client is a row of state, not a process
(Flower's virtual client engine). The shards arrive with every call (by reference on Ray: zero-copy views of
the object-store block), so a worker that Ray restarts needs nothing from its constructor but the config.
"""

from __future__ import annotations

import numpy as np
import torch

from raysim.base.memory import reuse_freed_memory, trim_memory
from raysim.base.precision import autocast, full_width
from raysim.base.seeding import Purpose, derive_seed
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.protocol import ClientContext, Personalised, SplitLearning
from raysim.core.registry import get_method
from raysim.core.training import DEVICE_EVALUATION_BATCH, correct_per_row
from raysim.data.npy_file import release_pages
from raysim.data.shards import ClientData, ShardStore
from raysim.engine.capacity import sent_rows, tier_rows
from raysim.engine.cohort import train_cohort
from raysim.engine.cohort_plan import cohort_training
from raysim.engine.too_large import refused_if_too_large
from raysim.privacy import calibration
from raysim.privacy.dp_sgd import DPSGD
from raysim.systems.tiers import ALL

# (client id, per-client instructions, client state[, work share[, capacity tier]]): a straggler's partial round has
# work < 1; a tier other than "all" trains part of the tensors (raysim.systems.tiers)
Task = (
    tuple[int, Tensors, Tensors | None]
    | tuple[int, Tensors, Tensors | None, float]
    | tuple[int, Tensors, Tensors | None, float, str]
)
# rows of several clients evaluated together, a multiple of every evaluation batch: batches as one concatenation gives
EVAL_WINDOW = 32 * DEVICE_EVALUATION_BATCH


def windows(parts: list[ClientData], size: int):
    """The rows of ``parts`` one after another, ``size`` rows at a time (the last window may be shorter), without
    holding all of them at once."""
    pending, held = [], 0
    for part in parts:
        start = 0
        while start < len(part):
            take = min(size - held, len(part) - start)
            pending.append(part.slice(start, start + take))
            held, start = held + take, start + take
            if held == size:
                yield ClientData.concat(pending)
                pending, held = [], 0
    if pending:
        yield ClientData.concat(pending)


def _to_cpu(tensors: Tensors | None) -> Tensors | None:
    """Detached CPU copies; what was computed under bf16 autocast leaves the client as float32."""
    if tensors is None:
        return None
    return {k: full_width(v.detach().cpu()) for k, v in tensors.items()}


class ClientRuntime:
    """Runs the client hooks of one method on a model built once."""

    def __init__(self, config, num_classes: int):
        # the model code (timm, torchvision: docs/performance.md, "Memory") is imported here, where a model is built,
        # and not with this module, which the coordinator imports too (its executor)
        from raysim.models.factory import build_model, pick_device

        torch.set_num_threads(config.resources.torch_threads)
        reuse_freed_memory()  # a forward's activations come from the heap the last one freed, not fresh pages
        self.config = config
        self.method = get_method(config.method).cls(config)
        self.device = pick_device(config.resources.gpus_per_client)
        with refused_if_too_large(config.method):
            model = build_model(config, self.method, num_classes)
        self.remote = None
        self.record_noise: float | None = None  # record-level DP's z, from the run's clients' sizes (first round)
        if isinstance(self.method, SplitLearning):  # the server's blocks run elsewhere; a stand-in asks for them
            self.remote = self.method.client_stand_in()
            model.offload(*self.method.server_segment(len(model.vit.blocks)), self.remote)
        self.model = model.to(self.device)

    def ready(self) -> bool:
        """Returns once the model is built (the pool's start-up happens before round 1, not in it)."""
        return True

    def train(
        self,
        round: int,
        broadcast: Broadcast,
        cohorts: list[list[Task]],
        shards: ShardStore,
        server=None,
        dispatch: int | None = None,
    ) -> list[ClientUpdate]:
        """Local updates of the given clients from the shared broadcast, cohort by cohort, in the order given: a
        cohort of several clients trains together when the method and ``train.cohort`` allow (:mod:`.cohort`) and
        none of them is of a capacity tier below ``all``, else client by client. ``server`` is split learning's
        server (or a handle on it). ``dispatch``: asynchronous mode's dispatch number, which seeds the client's work
        in place of the round (a client may train twice within one server version)."""
        if self.remote is not None:
            self.remote.server = server
        if self.config.privacy.mode == "record" and self.record_noise is None:
            self.record_noise = calibration.noise_multiplier(self.config, calibration.record_units(self.config, shards))
        updates = []
        for cohort in cohorts:
            ctxs = [self._context(round, dispatch, *task[:2], *task[3:]) for task in cohort]
            rows = [tier_rows(self.model, ctx.tier) for ctx in ctxs]  # {}: the client trains everything
            with autocast(self.device, self.config.train.precision):
                if len(cohort) > 1 and cohort_training(self.config) and all(ctx.tier == ALL for ctx in ctxs):
                    datas = [shards.train(ctx.client_id) for ctx in ctxs]
                    done = train_cohort(self.method, self.model, ctxs, broadcast, datas, self.config.train)
                else:
                    done = [
                        self._update(ctx, trained, broadcast, task[2], shards)
                        for ctx, trained, task in zip(ctxs, rows, cohort)
                    ]
            for trained, update in zip(rows, done):
                update.params, update.extras = _to_cpu(update.params), _to_cpu(update.extras)
                update.state = _to_cpu(update.state)
                if trained:
                    sent_rows(update, broadcast, trained)
            updates += done
        release_pages(shards.images)  # a mapped block's pages the clients read: not kept through the rounds
        return updates

    def _update(self, ctx: ClientContext, rows, broadcast: Broadcast, state, shards: ShardStore) -> ClientUpdate:
        """One client's update, training the rows its capacity tier affords (``rows``: :func:`.capacity.tier_rows`)."""
        with self.model.training_rows(rows):
            return self.method.client_update(ctx, broadcast, state, shards.train(ctx.client_id))

    def _context(
        self,
        round: int,
        dispatch: int | None,
        client_id: int,
        instructions: Tensors,
        work: float = 1.0,
        tier: str = ALL,
    ) -> ClientContext:
        run_seed = self.config.federation.seed
        if dispatch is None:
            seed = derive_seed(run_seed, Purpose.CLIENT, round, client_id)
        else:
            seed = derive_seed(run_seed, Purpose.DISPATCHED, dispatch, client_id)
        private = None
        if self.record_noise is not None:
            private = DPSGD(self.record_noise, self.config.privacy.initial_clip, seed)
        return ClientContext(
            round, client_id, seed, self.model, self.device, self.config, instructions, work, tier, private
        )

    def evaluate(
        self, params: Tensors, client_ids: list[int], states: dict[int, Tensors], shards: ShardStore, server=None
    ) -> dict[int, tuple[int, int]]:
        """(correct, total) on each client's test rows; clients evaluated with the global parameters run as one
        batch, a personalised method's clients with their own. A mapped block's pages are dropped as the rows are read
        (:func:`~raysim.data.npy_file.release_pages`): evaluating every client reads all its test rows."""
        if self.remote is not None:
            self.remote.server = server
        out: dict[int, tuple[int, int]] = {}
        shared = []
        for client_id in client_ids:
            own = (
                self.method.eval_params(params, states.get(client_id))
                if isinstance(self.method, Personalised)
                else params
            )
            if own is params:
                shared.append(client_id)
            else:
                self.model.load_trainable(own)
                data = shards.test(client_id)
                out[client_id] = (int(self._correct(data).sum()), len(data))
                release_pages(shards.images)
        if shared:
            self.model.load_trainable(params)
            parts = [shards.test(c) for c in shared]
            owner = np.repeat(np.arange(len(shared)), [len(p) for p in parts])
            correct = [np.zeros(0)]
            for window in windows(parts, EVAL_WINDOW):  # a copy: the block's pages read for it can go
                release_pages(shards.images)
                correct.append(self._correct(window))
            hits = np.bincount(owner, weights=np.concatenate(correct), minlength=len(shared)).astype(np.int64)
            out.update({c: (int(hits[i]), len(parts[i])) for i, c in enumerate(shared)})
        trim_memory()  # the evaluation batches' activations, larger than training's: not held through the rounds
        return out

    def _correct(self, data: ClientData) -> np.ndarray:
        """Per-row hits of the method's inference forward with the loaded tensors."""
        with autocast(self.device, self.config.train.precision):
            return correct_per_row(
                self.model, data, self.device, lambda x, rows: self.method.predict(self.model, x, data, rows)
            )
