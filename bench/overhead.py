"""raysim's overhead: the same FedVPT workload through raysim (Ray backend, 1 worker) and a plain PyTorch loop.

Both sides use the same shards, model, seeds, client sampling, batch order and optimiser, so they must also
print the same accuracies; the plain loop is written by hand here (no raysim round loop, no Ray).
Prints the wall time of the round loop (start-up excluded) and the ratio raysim / plain. Target <= 1.15.

    python bench/overhead.py                      # 100 clients, 5 per round, 10 rounds
    python bench/overhead.py --rounds 20 --local-epochs 2
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import torch

from raysim.config import build_config
from raysim.core.registry import get_method
from raysim.core.seeding import derive_seed, sample_clients
from raysim.core.training import make_optimizer, model_inputs
from raysim.engine.driver import connect_ray, initial_state, make_simulation, prepare_shards
from raysim.models.factory import build_model


def plain_loop(config, shards, initial) -> tuple[float, list[float]]:
    """FedAvg on prompts + head in one process: the textbook loop, timed."""
    torch.set_num_threads(config.resources.torch_threads)
    model = build_model(config, get_method(config.method)(config), shards.info.num_classes)
    fed, cfg = config.federation, config.train
    names = model.trainable_names()
    params = dict(model.named_parameters())
    global_params = {k: v.clone() for k, v in initial.params.items()}
    accuracies = []
    start = time.perf_counter()
    for round in range(1, fed.rounds + 1):
        sampled = sample_clients(fed.seed, round, shards.seen_clients(), fed.clients_per_round)
        updates, sizes = [], []
        for client in sampled:
            with torch.no_grad():
                for k in names:
                    params[k].copy_(global_params[k])
            data = shards.train(client)
            optimizer = make_optimizer([params[k] for k in names], cfg)
            generator = torch.Generator().manual_seed(derive_seed(fed.seed, "client", round, client))
            labels = torch.tensor(data.labels)
            model.train()
            for _ in range(cfg.local_epochs):
                order = torch.randperm(len(data), generator=generator)
                for s in range(0, len(data), cfg.batch_size):
                    idx = order[s : s + cfg.batch_size].numpy()
                    loss = torch.nn.functional.cross_entropy(
                        model(model_inputs(model, data.images[idx], "cpu")), labels[idx]
                    )
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
            model.eval()
            updates.append({k: params[k].detach().clone() for k in names})
            sizes.append(len(data))
        weights = torch.tensor(sizes, dtype=torch.float64) / sum(sizes)
        global_params = {
            k: torch.tensordot(weights, torch.stack([u[k].double() for u in updates]), dims=1).float() for k in names
        }
        with torch.no_grad():
            for k in names:
                params[k].copy_(global_params[k])
            correct = 0
            clients = shards.seen_clients()
            images = np.concatenate([shards.test(c).images for c in clients])
            labels = torch.tensor(np.concatenate([shards.test(c).labels for c in clients]))
            for s in range(0, len(labels), 256):
                correct += int(
                    (model(model_inputs(model, images[s : s + 256], "cpu")).argmax(1) == labels[s : s + 256]).sum()
                )
        accuracies.append(100.0 * correct / len(labels))
    return time.perf_counter() - start, accuracies


def raysim_loop(config, shards, initial) -> tuple[float, list[float]]:
    simulation = make_simulation(config, shards, initial)
    try:
        start = time.perf_counter()
        accuracies = [simulation.run_round(r).metrics["global_acc"] for r in range(1, config.federation.rounds + 1)]
        return time.perf_counter() - start, accuracies
    finally:
        simulation.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--participation", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument(
        "--cpus", type=float, default=2.0, help="CPUs (torch threads) for the one worker and the plain loop"
    )
    args = parser.parse_args()
    config = build_config(
        "fedvpt",
        [
            {
                "federation": {"clients": args.clients, "participation": args.participation, "rounds": args.rounds},
                "train": {"local_epochs": args.local_epochs},
                "resources": {"backend": "ray", "workers": 1, "cpus_per_client": args.cpus},
            }
        ],
    )
    import ray

    ray.init(num_cpus=max(2, int(args.cpus)), include_dashboard=False, logging_level=logging.WARNING)
    connect_ray(config.resources)
    config, initial, shards = initial_state(config, prepare_shards(config))
    ray_time, ray_acc = raysim_loop(config, shards, initial)
    plain_time, plain_acc = plain_loop(config, shards, initial)
    same = np.allclose(ray_acc, plain_acc, atol=1e-6)
    print(
        f"workload: fedvpt, {args.clients} clients, {config.federation.clients_per_round}/round, "
        f"{args.rounds} rounds, E={args.local_epochs}, eval every round, {args.cpus:g} CPU"
    )
    print(f"{'':24}{'round loop s':>14}{'s/round':>10}{'final global acc':>18}")
    print(f"{'plain PyTorch loop':24}{plain_time:14.2f}{plain_time / args.rounds:10.3f}{plain_acc[-1]:18.2f}")
    print(f"{'raysim (Ray, 1 worker)':24}{ray_time:14.2f}{ray_time / args.rounds:10.3f}{ray_acc[-1]:18.2f}")
    print(f"ratio raysim / plain: {ray_time / plain_time:.3f} (target <= 1.15); identical accuracies: {same}")


if __name__ == "__main__":
    main()
