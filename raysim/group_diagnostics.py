"""Diagnostics of group-prompt selection (SGPT Table 4, Fig. 3, App. D.2), shared by SGPT and FGPT.

Computed on the coordinator from what the FL protocol already has (the clients' selection counts N_g^i, the
server's v) plus, on evaluated rounds, an oracle view for analysis only: the cached queries of every
client's rows, assigned with the current keys (plain Select), scored against ground truth (coarse labels,
else domains) and against centralised K-Means on the training queries. Nothing here feeds back into training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from raysim import prompt_selection as sel

KEYS, FIXED_KEYS, TOTAL, COUNTS = "extra.selection_keys", "fixed_keys", "selection_total", "selection_counts"
USED_SHARE = 0.01  # a group is "in use" when it takes at least 1% of the rows


def assign(queries: np.ndarray, keys: torch.Tensor) -> np.ndarray:
    """Plain Select: argmax_g cos(q, k_g) per row."""
    return sel.cosine(torch.as_tensor(queries, dtype=torch.float32), keys.float()).argmax(dim=1).numpy()


def truth_of(shards, labels: np.ndarray, domains: np.ndarray) -> np.ndarray | None:
    """Ground-truth clusters: coarse labels when the dataset has them, else domains when there are several."""
    info = shards.info
    if info.coarse_of_class is not None:
        return np.asarray(info.coarse_of_class)[labels]
    return domains if info.num_domains > 1 else None


class GroupDiagnostics:
    """Mixin for methods that select group prompts by cosine between cached queries and keys."""

    _kmeans: tuple[np.ndarray, np.ndarray] | None = None  # (train rows, K-Means labels): a fixed function of the data
    metrics = ("groups_selected", "q_entropy", "cluster_top_share", "cluster_groups_used", "cluster_acc",
               "kmeans_congruence")

    def selection_keys(self, state) -> torch.Tensor | None:
        return state.params.get(KEYS, state.server.get(FIXED_KEYS))

    def diagnostics(self, round, state, results, shards, evaluated):
        keys = self.selection_keys(state)
        if keys is None:
            return {}, {}
        groups = keys.shape[0]
        train_counts = {str(r.client_id): r.update[COUNTS].tolist() for r in results if COUNTS in r.update}
        round_total = np.sum(list(train_counts.values()), axis=0) if train_counts else np.zeros(groups)
        metrics = {"groups_selected": float((round_total > 0).sum())}
        if TOTAL in state.server:
            metrics["q_entropy"] = sel.normalised_entropy(sel.shares(state.server[TOTAL]))
        records: dict[str, Any] = {"round": round, "train_counts": train_counts}
        if evaluated:
            metrics.update(self._clustering(keys, shards, records))
        return metrics, records

    def _clustering(self, keys: torch.Tensor, shards, records: dict) -> dict[str, float]:
        queries, groups = shards.features["query"], keys.shape[0]
        test = np.arange(shards.test_offsets[0], shards.test_offsets[-1])  # every client's test rows, unseen too
        owner = np.repeat(np.arange(shards.num_clients), shards.test_sizes())
        assigned = assign(queries[test], keys)
        per_client = np.zeros((shards.num_clients, groups), dtype=np.int64)
        np.add.at(per_client, (owner, assigned), 1)
        records["eval_counts"] = per_client.tolist()
        share = np.bincount(assigned, minlength=groups) / max(1, len(assigned))
        out = {"cluster_top_share": float(share.max()), "cluster_groups_used": float((share >= USED_SHARE).sum())}
        truth = truth_of(shards, shards.labels[test], shards.domains[test])
        if truth is not None:
            out["cluster_acc"] = 100.0 * sel.purity(assigned, truth)
        rows, kmeans = self._kmeans_of(shards, groups)
        out["kmeans_congruence"] = 100.0 * sel.congruence(assign(queries[rows], keys), kmeans, shards.labels[rows])
        return out

    def _kmeans_of(self, shards, groups: int) -> tuple[np.ndarray, np.ndarray]:
        """Centralised K-Means (G clusters) on the seen clients' training queries, computed once per run."""
        if self._kmeans is None:
            from sklearn.cluster import KMeans

            rows = np.concatenate([np.arange(shards.train_offsets[c], shards.train_offsets[c + 1])
                                   for c in shards.seen_clients()])
            labels = KMeans(n_clusters=groups, n_init=3, random_state=self.config.federation.seed).fit_predict(
                shards.features["query"][rows])
            self._kmeans = (rows, labels)
        return self._kmeans

    def artifacts(self, records: list[dict[str, Any]], folder: Path) -> list[Path]:
        from raysim.plots import plot_selection_map, plot_selection_stability

        evaluated = [r for r in records if "eval_counts" in r]
        if not evaluated:
            return []
        folder = Path(folder)
        counts = folder / "selection_counts.json"
        counts.write_text(json.dumps(records))
        stack = np.array([r["eval_counts"] for r in evaluated])  # [rounds, clients, groups]
        busiest = int(stack[-1].sum(axis=1).argmax())
        paths = [counts, folder / "selection_map.png", folder / "selection_stability.png"]
        plot_selection_map(stack[-1], f"{self.name}: test rows per group (final keys)", paths[1])
        plot_selection_stability(stack[:, busiest], [r["round"] for r in evaluated],
                                 f"{self.name}: client {busiest}, rows per group over rounds", paths[2])
        return paths
