"""Group prompts, shared by SGPT (CVPR 2024) and FGPT/FGPT-U (Deng et al.): block layouts, the cached query,
aggregation by selection counts, and the selection diagnostics (SGPT Table 4, Fig. 3, App. D.2).

A sample's query q(x) is the frozen backbone's class token, ReLU'd and L2-normalised (the authors' code); it
depends only on x and frozen weights, so it is computed once per row and run and cached with the shards.

The diagnostics are computed where the state lives, from what the FL protocol already has (the clients'
selection counts N_g^i, the server's v) plus, on evaluated rounds, an oracle view for analysis only: the cached
queries of every client's rows, assigned with the current keys (plain Select), scored against ground truth
(coarse labels, else domains) and against centralised K-Means on the training queries. Nothing here feeds back
into training.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from raysim.base.errors import ConfigError
from raysim.core.messages import ClientUpdate, Tensors
from raysim.core.protocol import Diagnostics
from raysim.ops import selection as sel
from raysim.ops.aggregate import weighted_mean

KEYS, FIXED_KEYS, TOTAL, COUNTS = "extra.selection_keys", "fixed_keys", "selection_total", "selection_counts"
USED_SHARE = 0.01  # a group is "in use" when it takes at least 1% of the rows
INSTABILITY = "selection_instability"  # logged once per run (Diagnostics.run_metrics)


def paper_blocks(depth: int, first: int, count: int) -> tuple[int, ...]:
    """A block range given on the paper's 12-block ViT (0-based ``first``, ``count`` blocks) scaled to ``depth``.

    Start and length are each scaled by depth / 12 and rounded half up (at least one block): SGPT's shared
    blocks 0-2 and group blocks 3-5 of 12 become 0-1 and 2-3 on the 6-block default backbone.
    """
    scale = depth / 12
    start = min(depth - 1, math.floor(first * scale + 0.5))
    return tuple(range(start, min(depth, start + max(1, math.floor(count * scale + 0.5)))))


def check_blocks(name: str, blocks: tuple[int, ...], depth: int) -> tuple[int, ...]:
    """``blocks`` as a sorted tuple, or a one-line ConfigError when one is outside the backbone."""
    if (
        not blocks
        or any(not isinstance(b, int) or not 0 <= b < depth for b in blocks)
        or len(set(blocks)) != len(blocks)
    ):
        raise ConfigError(
            f"{name}={list(blocks)} must be distinct block indices in [0, {depth - 1}] "
            f"(the backbone has {depth} blocks)"
        )
    return tuple(sorted(blocks))


def query_layer(option: str, layer: int, depth: int) -> int:
    """The 1-based layer number of the query: ``layer``, or the last block for 0."""
    layer = layer or depth
    if layer > depth:
        raise ConfigError(f"{option}={layer} is past the backbone's {depth} blocks; use 1..{depth} (0 = the last)")
    return layer


def query_depth(layer: int, depth: int, reading: str) -> tuple[int, bool]:
    """(blocks run, final norm applied) for the query at 1-based ``layer``, read as ``reading`` says.

    "paper": cls_L, the class token after block L (SGPT Sec. 2.2 / Eq. 3, where cls_u is the output of layer L_u,
    and Sec. 5.1's "5-th layer"), with the final norm only after the last block. "code": the SGPT authors' code
    (ubc-tea/SGPT ``models/vit_models_pr.py:396-410``) runs ``blocks[:L + 1]`` (it breaks after 0-based block 5 for
    its "5th layer") and then the final norm. Both give the last block plus the norm for L = depth.
    """
    if reading == "code":
        return min(layer + 1, depth), True
    return layer, layer == depth


@torch.no_grad()
def backbone_query(vit, x: torch.Tensor, layer: int, relu: bool = True, reading: str = "paper") -> torch.Tensor:
    """q(x): the frozen, prompt-free backbone's class token at ``layer`` (1-based, read as :func:`query_depth`
    says), ReLU (SGPT/FGPT; DualPrompt has none) then L2-normalise."""
    blocks, norm = query_depth(layer, len(vit.blocks), reading)
    tokens = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))
    for block in vit.blocks[:blocks]:
        tokens = block(tokens)
    if norm:
        tokens = vit.norm(tokens)
    return torch.nn.functional.normalize(torch.relu(tokens[:, 0]) if relu else tokens[:, 0], dim=1)


def cached_cosine(data, rows, keys: torch.Tensor) -> torch.Tensor:
    """Cosines between the cached queries of ``rows`` of a client's data and ``keys`` (on the keys' device)."""
    return sel.cosine(torch.tensor(data.features["query"][rows]).to(keys.device), keys)


COUNTS_SENT = {COUNTS: "N_g^i, how many of the client's rows chose each group"}
COUNTS_PRIVATE = {COUNTS: 1.0}  # under user-level DP, as shares (L2 norm <= 1) with a clip of their own, C
COUNTS_DROPPED = {COUNTS: 0.0}  # not sent under user-level DP: the server's step on one noised mean never reads them
COUNTS_NOT_RECORD_PRIVATE = "its clients send their rows' group counts, which DP-SGD does not privatise"


def count_shares(counts: torch.Tensor) -> torch.Tensor:
    """A client's group counts N_g^i as shares of its rows (sum 1, so L2 norm <= 1): what user-level DP clips and
    noises of the counts; all zeros for a client that counted nothing."""
    total = counts.sum()
    return counts / total if total > 0 else torch.zeros_like(counts)


def unchosen(update: ClientUpdate, name: str) -> Tensors:
    """``{name: mask}``, the rows of the groups ``update``'s counts N_g^i did not choose: what
    :func:`aggregate_with_counts` weighs at zero wherever another client chose the group."""
    counts = update.extras.get(COUNTS)
    return {name: counts == 0} if counts is not None else {}


def aggregate_with_counts(
    updates: list[ClientUpdate], by_counts: str, fallback_at_most: float = 0
) -> tuple[Tensors, torch.Tensor]:
    """Server aggregation of SGPT/FGPT: every tensor weighted N_i / N except ``by_counts``, which is weighted per
    group by N_g^i / sum_i N_g^i (the extra ``selection_counts``), or the plain mean where sum_i N_g^i <=
    ``fallback_at_most`` (:func:`raysim.ops.selection.group_weighted_mean`); also returns the N_g^i ``[m, G]``."""
    group_counts = torch.stack([u.extras[COUNTS] for u in updates])
    params = weighted_mean([u.params for u in updates], [u.num_samples for u in updates])
    stacked = torch.stack([u.params[by_counts] for u in updates])
    params[by_counts] = sel.group_weighted_mean(stacked, group_counts, fallback_at_most)
    return params, group_counts


def assign(queries: np.ndarray, keys: torch.Tensor) -> np.ndarray:
    """Plain Select: argmax_g cos(q, k_g) per row."""
    return sel.cosine(torch.as_tensor(queries, dtype=torch.float32), keys.float()).argmax(dim=1).numpy()


def evaluation_counts(records: list[dict[str, Any]]) -> np.ndarray:
    """Test rows per client and group at each evaluation of a run's records: [evaluations, clients, groups]."""
    return np.array([r["eval_counts"] for r in records if "eval_counts" in r])


def truth_of(shards, labels: np.ndarray, domains: np.ndarray) -> np.ndarray | None:
    """Ground-truth clusters: coarse labels when the dataset has them, else domains when there are several."""
    info = shards.info
    if info.coarse_of_class is not None:
        return np.asarray(info.coarse_of_class)[labels]
    return domains if info.num_domains > 1 else None


class GroupDiagnostics(Diagnostics):
    """Mixin for methods that select group prompts by cosine between cached queries and keys."""

    _kmeans: tuple[np.ndarray, np.ndarray] | None = None  # (train rows, K-Means labels): a fixed function of the data

    def selection_keys(self, state) -> torch.Tensor | None:
        return state.params.get(KEYS, state.server.get(FIXED_KEYS))

    def diagnostics(self, round, state, updates, shards, evaluated):
        keys = self.selection_keys(state)
        if keys is None:
            return {}, {}
        groups = keys.shape[0]
        train_counts = {str(u.client_id): u.extras[COUNTS].tolist() for u in updates if COUNTS in u.extras}
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

            rows = np.concatenate(
                [np.arange(shards.train_offsets[c], shards.train_offsets[c + 1]) for c in shards.seen_clients()]
            )
            labels = KMeans(n_clusters=groups, n_init=3, random_state=self.config.federation.seed).fit_predict(
                shards.features["query"][rows]
            )
            self._kmeans = (rows, labels)
        return self._kmeans

    def run_metrics(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """SGPT Fig. 3's selection instability over the run's evaluations (:func:`raysim.ops.selection.instability`)."""
        value = sel.instability(evaluation_counts(records))
        return {} if np.isnan(value) else {INSTABILITY: value}

    def artifacts(self, records: list[dict[str, Any]], folder: Path) -> list[Path]:
        from raysim.tracking.plots import plot_selection_map, plot_selection_stability  # matplotlib: at the run's end

        evaluated = [r for r in records if "eval_counts" in r]
        if not evaluated:
            return []
        folder = Path(folder)
        counts = folder / "selection_counts.json"
        counts.write_text(json.dumps(records))
        stack = evaluation_counts(records)
        busiest = int(stack[-1].sum(axis=1).argmax())
        paths = [counts, folder / "selection_map.png", folder / "selection_stability.png"]
        plot_selection_map(stack[-1], f"{self.info.name}: test rows per group (final keys)", paths[1])
        plot_selection_stability(
            stack[:, busiest],
            [r["round"] for r in evaluated],
            f"{self.info.name}: client {busiest}, rows per group over rounds",
            paths[2],
        )
        return paths
