"""FGPT / FGPT-U: the query, fixed keys, N_g^i-weighted group prompts, the top-K ensemble's cost and equivalences."""

import math
from types import SimpleNamespace

import pytest
import torch

from raysim.algorithms._group_prompts import cached_cosine
from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core import training as train
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.registry import get_method
from raysim.engine.client import ClientRuntime
from raysim.models.backbones import build_backbone
from raysim.ops import selection as sel
from raysim.testing.smoke import open_simulation, prepared

TINY = {
    "federation": {"clients": 6, "rounds": 2, "participation": 0.5, "seed": 2},
    "data": {"dataset": "synthetic", "partition": "dirichlet", "alpha": 1.0},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
}
GROUP = "extra.group_prompts"


def runtime_for(method, **options):
    config = build_config(method, [TINY, {"fgpt": {"groups": 4, **options}}])
    config, initial, shards = prepared(config)
    return ClientRuntime(config, shards.info.num_classes), initial, shards


def backbone_passing_class_token(cls: list[float]):
    """The nano backbone cut down to what a hand computation follows: zero patch and position embeddings and blocks
    that add nothing (zero output projections), so the last block's class token is ``cls`` padded with zeros."""
    vit = build_backbone("raysim_vit_nano_p4_16")
    with torch.no_grad():
        for p in (vit.patch_embed.proj.weight, vit.patch_embed.proj.bias, vit.pos_embed, vit.cls_token, vit.norm.bias):
            p.zero_()
        for block in vit.blocks:
            for layer in (block.attn.proj, block.mlp.fc2):
                layer.weight.zero_(), layer.bias.zero_()
        vit.norm.weight.fill_(1.0)
        vit.cls_token[0, 0, : len(cls)] = torch.tensor(cls)
    return vit


@pytest.mark.parametrize(
    "query, expected, picked",
    [
        # FGPT Eq. 5: q = c / |c| (the final LayerNorm only rescales a zero-mean c); c = (3, -1, -4, 2), |c|^2 = 30
        ("plain", [3 / math.sqrt(30), -1 / math.sqrt(30), -4 / math.sqrt(30), 2 / math.sqrt(30)], 0),
        # ReLU first: (3, 0, 0, 2) / sqrt(13)
        ("relu", [3 / math.sqrt(13), 0.0, 0.0, 2 / math.sqrt(13)], 1),
    ],
)
def test_query_is_the_normalised_class_token_with_relu_only_when_asked(query, expected, picked):
    method = get_method("fgpt").cls(build_config("fgpt", [{"fgpt": {"query": query}}]))
    vit = backbone_passing_class_token([3.0, -1.0, -4.0, 2.0])
    q = method.row_features(SimpleNamespace(vit=vit), torch.rand(2, 3, 16, 16))["query"]
    assert torch.allclose(q[:, :4], torch.tensor([expected, expected]), atol=1e-5)
    assert q[:, 4:].abs().max() < 1e-6
    # keys -e_2 and e_0: cosines (0.730, 0.548) plain, (0, 0.832) with ReLU: the two queries pick different groups
    keys = torch.zeros(2, 64)
    keys[0, 2], keys[1, 0] = -1.0, 1.0
    assert sel.cosine(q, keys).argmax(dim=1).tolist() == [picked, picked]


def test_an_unknown_query_names_the_valid_ones():
    with pytest.raises(ConfigError, match="^fgpt.query='cosine' is not one of plain, relu$"):
        build_config("fgpt", [{"fgpt": {"query": "cosine"}}])


def test_group_prompts_are_averaged_with_selection_counts():
    method = get_method("fgpt").cls(build_config("fgpt", [TINY, {"fgpt": {"groups": 2, "k": 1}}]))
    state = GlobalState(params={"vit.head.bias": torch.tensor([0.0]), GROUP: torch.zeros(2, 1, 1, 1)})
    results = [
        ClientUpdate(
            0,
            1,
            {"vit.head.bias": torch.tensor([2.0]), GROUP: torch.tensor([1.0, 5.0]).reshape(2, 1, 1, 1)},
            {"selection_counts": torch.tensor([3.0, 0.0], dtype=torch.float64)},
        ),
        ClientUpdate(
            1,
            3,
            {"vit.head.bias": torch.tensor([6.0]), GROUP: torch.tensor([3.0, 7.0]).reshape(2, 1, 1, 1)},
            {"selection_counts": torch.tensor([1.0, 0.0], dtype=torch.float64)},
        ),
    ]
    out = method.aggregate(1, state, results)
    assert out.params["vit.head.bias"].item() == pytest.approx((2 + 18) / 4)  # N_i / N
    # g0: beta = (3/4, 1/4) -> 1.5; g1 chosen by nobody -> plain mean 6
    assert out.params[GROUP].flatten().tolist() == [1.5, 6.0]


def test_the_group_rows_a_client_leaves_out_are_those_the_aggregation_weighs_at_zero():
    method = get_method("fgpt").cls(build_config("fgpt", [TINY, {"fgpt": {"groups": 2, "k": 1}}]))
    state = GlobalState(params={GROUP: torch.zeros(2, 1, 1, 1)})
    a, b = (
        ClientUpdate(i, 1, {GROUP: torch.tensor(values).reshape(2, 1, 1, 1)}, {"selection_counts": torch.tensor(c)})
        for i, (values, c) in enumerate([([1.0, 5.0], [3.0, 0.0]), ([3.0, 7.0], [1.0, 2.0])])
    )
    assert {name: rows.tolist() for name, rows in method.rows_left_out(a).items()} == {GROUP: [False, True]}
    before = method.aggregate(1, state, [a, b]).params[GROUP]
    a.params[GROUP][1] = -40.0  # a row a compressed uplink leaves out: nothing changes
    assert torch.equal(method.aggregate(1, state, [a, b]).params[GROUP], before)
    a.params[GROUP][0] = -40.0  # a row it sends
    assert not torch.equal(method.aggregate(1, state, [a, b]).params[GROUP], before)


def test_keys_are_fixed_orthogonal_never_communicated_and_never_trained():
    config = build_config("fgpt", [TINY, {"fgpt": {"groups": 4}}])
    config, initial, shards = prepared(config)
    keys = initial.server["fixed_keys"]
    assert "extra.fixed_keys" not in initial.params
    assert torch.allclose(keys @ keys.T, torch.eye(4), atol=1e-5)
    with open_simulation(config, shards) as (simulation, _, _):
        for r in (1, 2):
            simulation.run_round(r)
        assert torch.equal(simulation.global_state().server["fixed_keys"], keys)
    random = build_config("fgpt", [TINY, {"fgpt": {"groups": 4, "keys": "random"}}])
    other = prepared(random)[1].server["fixed_keys"]
    assert (other @ other.T - torch.eye(4)).abs().max() > 1e-3


def count_blocks(model):
    calls = []
    handles = [block.register_forward_hook(lambda *_: calls.append(1)) for block in model.vit.blocks]
    return calls, handles


def test_fgpt_u_with_k1_is_fgpt_and_with_k2_is_the_mean_of_full_passes_at_lower_cost():
    runtime, _, shards = runtime_for("fgpt-u", k=2)
    model, data = runtime.model, shards.test(0)
    rows = torch.arange(min(5, len(data))).numpy()
    x = train.model_inputs(model, data.images[rows], runtime.device)
    fgpt = get_method("fgpt").cls(build_config("fgpt", [TINY, {"fgpt": {"groups": 4}}]))
    u1 = get_method("fgpt-u").cls(build_config("fgpt-u", [TINY, {"fgpt": {"groups": 4, "k": 1}}]))
    with torch.no_grad():
        torch.nn.init.normal_(model.extra["group_prompts"])  # distinct groups, so the ensemble matters
        assert torch.equal(u1.predict(model, x, data, rows), fgpt.predict(model, x, data, rows))
        top = cached_cosine(data, rows, model.extra["fixed_keys"]).topk(2, dim=1).indices
        calls, handles = count_blocks(model)
        ensemble = runtime.method.predict(model, x, data, rows)
        ensemble_blocks = len(calls)
        calls.clear()
        full = [model(x, {"group": model.extra["group_prompts"][top[:, j]]}) for j in range(2)]
        full_blocks = len(calls)
        for h in handles:
            h.remove()
    assert torch.allclose(ensemble, torch.stack(full).mean(dim=0), atol=1e-5)
    assert not torch.allclose(ensemble, full[0], atol=1e-3)
    depth, u = len(model.vit.blocks), runtime.method.group_block(len(model.vit.blocks))
    assert (ensemble_blocks, full_blocks) == (u + 2 * (depth - u), 2 * depth)


def test_training_selects_one_group_per_row_with_the_fixed_keys():
    runtime, initial, shards = runtime_for("fgpt")
    (result,) = runtime.train(1, Broadcast(initial.params), [[(0, {}, None)]], shards)
    counts = result.extras["selection_counts"]
    data = shards.train(0)
    keys = initial.server["fixed_keys"]
    expected = torch.bincount((torch.as_tensor(data.features["query"]) @ keys.T).argmax(dim=1), minlength=4)
    assert counts.tolist() == expected.double().tolist()
    assert set(result.params) == set(initial.params) and set(result.extras) == {"selection_counts"}
