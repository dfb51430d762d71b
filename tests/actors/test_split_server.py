"""The ``SplitServer`` actor: the in-process server's answers, and several clients' requests served at once."""

from __future__ import annotations

import torch

from raysim.actors.split_server import ServerHandle, SplitServer
from raysim.config import build_config
from raysim.runner import initial_state, prepare_shards
from raysim.split import make_server, split_encoder

TINY = {"federation": {"clients": 4, "rounds": 1, "seed": 3},
        "data": {"dataset": "synthetic", "partition": "iid"},
        "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False}}


def test_actor_answers_as_the_in_process_server_and_serves_clients_concurrently(ray_session):
    config = build_config("fedvz", [TINY])
    initial, shards = initial_state(config, prepare_shards(config))
    encoder, _ = split_encoder(initial.server)
    local = make_server(config, shards.info.num_classes, encoder)
    actor = SplitServer.options(num_cpus=0, max_concurrency=4).remote(config, shards.info.num_classes, encoder)
    handle = ServerHandle(actor)
    h = torch.randn(512, 17, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(handle.forward(None, h)[0], local.forward(None, h)[0])
    assert all(torch.equal(a, b) for a, b in zip(handle.perturbed(h, 5, 1e-3)[:2], local.perturbed(h, 5, 1e-3)[:2]))
    handle.end_round()
    ray_session.get([actor.forward.remote(None, h) for _ in range(4)])  # four clients' requests at once
    compute_s, peak = handle.end_round()
    assert peak >= 2 and compute_s > 0
    ray_session.kill(actor)
