"""Split learning's server as a Ray actor: the in-process server's answers, and several clients' requests served
at once."""

from __future__ import annotations

import ray
import torch

from raysim.config import build_config
from raysim.core.protocol import split_encoder
from raysim.engine.executors import Pool, start_server
from raysim.testing.smoke import prepared

TINY = {
    "federation": {"clients": 4, "rounds": 1, "seed": 3},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
}


def test_actor_answers_as_the_in_process_server_and_serves_clients_concurrently(ray_session):
    config = build_config("fedvz", [TINY])
    config, initial, shards = prepared(config)
    encoder, _ = split_encoder(initial.server)
    local = start_server(config, shards.info.num_classes, encoder, None)
    remote = start_server(config, shards.info.num_classes, encoder, Pool(2, None))
    h = torch.randn(512, 17, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(remote.forward(None, h)[0], local.forward(None, h)[0])
    assert all(torch.equal(a, b) for a, b in zip(remote.perturbed(h, 5, 1e-3)[:2], local.perturbed(h, 5, 1e-3)[:2]))
    remote.end_round()
    # four clients' requests at once: one stored input (no request waits on its own upload) large enough that each
    # forward outlasts the others' dispatch by far, so that they overlap on a loaded machine too
    big = ray.put(torch.randn(4096, 17, 64, generator=torch.Generator().manual_seed(1)))
    ray.get([remote.handle.forward.remote(None, big) for _ in range(4)])
    compute_s, peak = remote.end_round()
    assert peak >= 2 and compute_s > 0
    ray.kill(remote.handle)
