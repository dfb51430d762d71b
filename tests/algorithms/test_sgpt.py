"""SGPT: server math by hand, block coordinate descent (which tensors change in which block), selection, and the
fidelity options (paper defaults, the authors' code as alternatives) on tiny tensors and the nano backbone."""

from types import SimpleNamespace

import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core import training as train
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.registry import get_method
from raysim.engine.client import ClientRuntime
from raysim.engine.cohort import unfused_attention
from raysim.models.factory import build_model
from raysim.testing.smoke import prepared

TINY = {
    "federation": {"clients": 6, "rounds": 2, "participation": 0.5, "seed": 1},
    "data": {"dataset": "synthetic", "partition": "dirichlet", "alpha": 1.0},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
}
HEAD, SHARED, GROUP, KEYS = "vit.head.weight", "prompts.shared", "extra.group_prompts", "extra.selection_keys"


def sgpt(**options):
    return get_method("sgpt").cls(build_config("sgpt", [TINY, {"sgpt": {"groups": 2, **options}}]))


def two_clients():
    state = GlobalState(
        params={
            HEAD: torch.tensor([0.0]),
            SHARED: torch.tensor([0.0]),
            KEYS: torch.tensor([[1.0, 1.0], [1.0, 1.0]]),
            GROUP: torch.zeros(2, 1, 1, 2),
        },
        server={"selection_total": torch.tensor([1.0, 0.0], dtype=torch.float64)},
    )
    a = ClientUpdate(
        0,
        1,
        {
            HEAD: torch.tensor([1.0]),
            SHARED: torch.tensor([2.0]),
            KEYS: torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
            GROUP: torch.tensor([1.0, 1.0, 2.0, 2.0]).reshape(2, 1, 1, 2),
        },
        {"selection_counts": torch.tensor([2.0, 0.0], dtype=torch.float64)},
    )
    b = ClientUpdate(
        1,
        3,
        {
            HEAD: torch.tensor([5.0]),
            SHARED: torch.tensor([6.0]),
            KEYS: torch.tensor([[3.0, 0.0], [0.0, 3.0]]),
            GROUP: torch.tensor([3.0, 3.0, 6.0, 6.0]).reshape(2, 1, 1, 2),
        },
        {"selection_counts": torch.tensor([1.0, 3.0], dtype=torch.float64)},
    )
    return state, [a, b]


def test_aggregation_by_hand_with_momentum():
    state, results = two_clients()
    out = sgpt().aggregate(1, state, results)
    assert out.params[HEAD].item() == pytest.approx((1 * 1 + 3 * 5) / 4)  # N_i / N
    assert out.params[SHARED].item() == pytest.approx((1 * 2 + 3 * 6) / 4)
    # keys: g0 (2*[1,0] + 1*[3,0]) / 3 = [5/3, 0]; g1 (0*[0,1] + 3*[0,3]) / 3 = [0, 3]; then 0.5 prev + 0.5 new
    assert torch.allclose(out.params[KEYS], torch.tensor([[0.5 + 5 / 6, 0.5], [0.5, 2.0]]))
    # group prompts with N_i / N: g0 (1 + 9) / 4 = 2.5, g1 (2 + 18) / 4 = 5; momentum from 0 halves them
    assert torch.allclose(out.params[GROUP].flatten(), torch.tensor([1.25, 1.25, 2.5, 2.5]))
    assert out.server["selection_total"].tolist() == [4.0, 3.0]  # v_g += sum_i N_g^i, never reset


def test_momentum_weighs_the_previous_keys_by_alpha_k_and_the_previous_prompts_by_alpha_g():
    state, results = two_clients()
    out = sgpt(alpha_k=0.25, alpha_g=0.75).aggregate(1, state, results)
    # SGPT Eq. 7, alpha prev + (1 - alpha) new: keys 0.25 [[1, 1], [1, 1]] + 0.75 [[5/3, 0], [0, 3]]
    assert torch.allclose(out.params[KEYS], torch.tensor([[1.5, 0.25], [0.25, 2.5]]))
    # group prompts 0.75 * 0 + 0.25 [2.5, 2.5, 5, 5]
    assert torch.allclose(out.params[GROUP].flatten(), torch.tensor([0.625, 0.625, 1.25, 1.25]))


def test_aggregation_without_momentum_and_uniform_key_fallback():
    state, results = two_clients()
    for r in results:
        r.extras["selection_counts"] = torch.tensor([1.0, 0.0], dtype=torch.float64)
    out = sgpt(momentum=False).aggregate(1, state, results)
    # g0: (1*[1,0] + 1*[3,0]) / 2; g1 chosen by nobody: the plain mean of the clients' keys
    assert torch.allclose(out.params[KEYS], torch.tensor([[2.0, 0.0], [0.0, 2.0]]))
    assert torch.allclose(out.params[GROUP].flatten(), torch.tensor([2.5, 2.5, 5.0, 5.0]))


def test_clients_receive_the_cumulative_shares_only_with_the_qg_rule():
    state, _ = two_clients()
    broadcast = sgpt().configure(1, state, [0, 1])
    assert broadcast.extras["selection_share"].tolist() == [1.0, 0.0] and broadcast.params is state.params
    assert "selection_share" not in sgpt(key_rule="plain").configure(1, state, [0, 1]).extras


def trace_blocks(monkeypatch, **options):
    """Run one client's update and record, per local_train call, what required grad and what changed."""
    config = build_config("sgpt", [TINY, {"sgpt": {"groups": 3, **options}}])
    config, initial, shards = prepared(config)
    runtime = ClientRuntime(config, shards.info.num_classes)
    model, calls, original = runtime.model, [], train.local_train

    def spy(ctx, data, objective, epochs=None):
        before = model.trainable_state()
        required = {n for n, p in model.named_parameters() if p.requires_grad}
        stats = original(ctx, data, objective, epochs)
        after = model.trainable_state()
        calls.append((required, {n for n in before if not torch.equal(before[n], after[n])}))
        return stats

    monkeypatch.setattr(train, "local_train", spy)
    broadcast = runtime.method.configure(1, initial, [0])
    (update,) = runtime.train(1, broadcast, [[(0, {}, None)]], shards)
    return calls, update, len(shards.train(0))


HEAD_BOTH = {"vit.head.weight", "vit.head.bias"}


def test_bcd_trains_shared_then_group_with_shared_frozen(monkeypatch):
    calls, result, rows = trace_blocks(monkeypatch)
    (req1, changed1), (req2, changed2) = calls
    assert req1 == {SHARED} | HEAD_BOTH and changed1 == req1
    assert req2 == {GROUP, KEYS} | HEAD_BOTH and changed2 == req2
    assert result.extras["selection_counts"].sum() == rows  # one selection per row in Block II (E = 1)


def test_bcd_inv_reverses_the_blocks_and_joint_trains_everything_at_once(monkeypatch):
    (req1, _), (req2, _) = trace_blocks(monkeypatch, bcd="bcd-inv")[0]
    assert req1 == {GROUP, KEYS} | HEAD_BOTH and req2 == {SHARED} | HEAD_BOTH
    ((required, changed),) = trace_blocks(monkeypatch, bcd="joint")[0]
    assert required == changed == {SHARED, GROUP, KEYS} | HEAD_BOTH


def test_prompt_ablations_train_only_their_prompts(monkeypatch):
    ((required, _),) = trace_blocks(monkeypatch, prompts="shared")[0]
    assert required == {SHARED} | HEAD_BOTH
    ((required, _),) = trace_blocks(monkeypatch, prompts="group")[0]
    assert required == {GROUP, KEYS} | HEAD_BOTH


def test_inference_selects_by_plain_cosine_and_uses_the_selected_group_prompt():
    config = build_config("sgpt", [TINY, {"sgpt": {"groups": 3}}])
    config, _, shards = prepared(config)
    runtime = ClientRuntime(config, shards.info.num_classes)
    model, method, data = runtime.model, runtime.method, shards.test(0)
    rows = torch.arange(min(4, len(data))).numpy()
    x = train.model_inputs(model, data.images[rows], runtime.device)
    with torch.no_grad():
        chosen = (
            torch.as_tensor(data.features["query"][rows])
            @ torch.nn.functional.normalize(model.extra["selection_keys"], dim=1).T
        ).argmax(dim=1)
        expected = method.logits(model, x, chosen)
        assert torch.allclose(method.predict(model, x, data, rows), expected)
        other = method.logits(model, x, (chosen + 1) % 3)
    assert not torch.allclose(expected, other)


def test_initial_keys_are_orthogonal_and_shared_prompts_start_at_zero():
    config = build_config("sgpt", [TINY, {"sgpt": {"groups": 4}}])
    config, initial, shards = prepared(config)
    keys = initial.params[KEYS]
    assert torch.allclose(keys @ keys.T, torch.eye(4), atol=1e-5)
    assert not initial.params[SHARED].any()
    assert initial.params[GROUP].shape == (4, 1, 1, 64)  # nano: 4 blocks -> U_G = (1,), width 64
    assert shards.features["query"].shape == (len(shards.labels), 64)


def test_block_sets_and_select_layer_are_checked_against_the_depth():
    for options, message in [
        ({"shared_blocks": [4]}, "sgpt.shared_blocks=[4] must be distinct block indices in [0, 3]"),
        ({"select_layer": 5}, "sgpt.select_layer=5 is past the backbone's 4 blocks"),
    ]:
        config = build_config("sgpt", [TINY, {"sgpt": options}])
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            prepared(config)
    with pytest.raises(ConfigError, match="sgpt.groups=0 must be at least 1"):
        build_config("sgpt", [TINY, {"sgpt": {"groups": 0}}])


def test_key_fallback_at_most_averages_keys_of_rarely_chosen_groups_uniformly():
    state, results = two_clients()  # N_g^i: a [2, 0], b [1, 3]; totals 3 and 3
    paper = sgpt(momentum=False).aggregate(1, state, results)
    assert torch.allclose(paper.params[KEYS], torch.tensor([[5 / 3, 0.0], [0.0, 3.0]]))  # weighted, as above
    at = sgpt(momentum=False, key_fallback_at_most=3).aggregate(1, state, results)  # authors': total <= threshold
    assert torch.allclose(at.params[KEYS], torch.tensor([[2.0, 0.0], [0.0, 2.0]]))  # ([1,0]+[3,0])/2, ([0,1]+[0,3])/2
    below = sgpt(momentum=False, key_fallback_at_most=2).aggregate(1, state, results)
    assert torch.allclose(below.params[KEYS], paper.params[KEYS])
    assert torch.equal(at.params[GROUP], paper.params[GROUP])  # only the keys: group prompts stay N_i / N


NANO = {"model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False}}


def nano(**options):
    """SGPT and its model on the nano backbone (4 blocks, width 64, 16x16 input), 5 classes, no data."""
    config = build_config("sgpt", [NANO, {"sgpt": {"groups": 3, **options}}])
    method = get_method("sgpt").cls(config)
    return method, build_model(config, method, 5)


def test_batch_selection_gives_every_row_the_batch_modal_group_per_client_and_in_cohorts():
    method, model = nano(select_per="batch", key_rule="plain")
    keys = model.extra["selection_keys"].detach()
    x, y = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 3])
    query = keys[[0, 2, 2, 1]]  # per sample: groups 0, 2, 2, 1; the batch's mode: 2
    (_, _), (_, group_step) = method.steps(model, Broadcast(model.trainable_state()))
    loss, picked = group_step(x, y, query)
    assert picked.tolist() == [2, 2, 2, 2]
    ce = torch.nn.functional.cross_entropy(method.logits(model, x, picked), y)
    assert (loss - ce).item() == pytest.approx(-0.5, abs=1e-6)  # L_key = -mean cos(q, k_2) = -(0 + 1 + 1 + 0) / 4
    assert method._counts([x.new_zeros(()), picked])["selection_counts"].tolist() == [0.0, 0.0, 4.0]
    sample_method, _ = nano(key_rule="plain")
    assert sample_method.steps(model, Broadcast({}))[1][1](x, y, query)[1].tolist() == [0, 2, 2, 1]
    phase = method.cohort_phases(model, Broadcast(model.trainable_state()))[1]  # the group phase, vmapped per client
    queries = torch.stack([query, keys[[1, 1, 0, 0]]])  # client 1: a tie of 0 and 1 -> 0
    with torch.no_grad(), unfused_attention(model):
        _, picks = torch.func.vmap(phase.objective)(torch.stack([x, x]), torch.stack([y, y]), {"query": queries})
    assert picks.tolist() == [[2] * 4, [0] * 4]


def test_inference_selects_per_sample_in_batch_mode():
    method, model = nano(select_per="batch")
    data = SimpleNamespace(features={"query": model.extra["selection_keys"].detach()[[0, 2, 2, 1]].numpy()})
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = method.logits(model, x, torch.tensor([0, 2, 2, 1]))
        assert torch.allclose(method.predict(model, x, data, torch.arange(4).numpy()), expected)
        assert not torch.allclose(expected, method.logits(model, x, torch.tensor([2, 2, 2, 2])))


def test_shared_length_sets_the_prompt_shape_and_the_trainable_count():
    def shapes(**options):
        method, model = nano(shared_blocks=[0, 1], **options)
        state = model.trainable_state()
        shared = {k: tuple(v.shape) for k, v in state.items() if k.startswith(SHARED)}
        first_block = set(method.steps(model, Broadcast(state))[0][0])
        return shared, sum(v.numel() for v in state.values()), first_block

    shared, base, _ = shapes()
    assert shared == {SHARED: (2, 1, 64)}  # the paper: one token per shared block
    shared, count, _ = shapes(shared_length=3)
    assert shared == {SHARED: (2, 3, 64)} and count - base == 2 * 2 * 64
    shared, count, block_one = shapes(shared_length=3, shared_length_at="first")  # the authors' --n_prompt
    assert shared == {SHARED: (1, 3, 64), SHARED + "_rest": (1, 1, 64)} and count - base == 2 * 64
    assert block_one == {SHARED, SHARED + "_rest"} | HEAD_BOTH  # Block I trains both parts of P_S


def test_shared_init_zeros_or_vpt_xavier_range():
    _, model = nano(shared_blocks=[0, 1])
    assert not model.trainable_state()[SHARED].any()
    _, model = nano(shared_blocks=[0, 1], shared_init="xavier")
    prompt = model.trainable_state()[SHARED]
    bound = (6 / (3 * 4 * 4 + 64)) ** 0.5  # VPT: sqrt(6 / (C * patch_h * patch_w + D)) = 0.2315 on nano
    assert prompt.abs().max() <= bound and prompt.abs().max() > bound / 2 and prompt.unique().numel() == 128


@pytest.mark.parametrize(
    "options, message",
    [
        ({"select_layer_as": "authors"}, "sgpt.select_layer_as='authors' is not one of paper, code"),
        ({"select_per": "client"}, "sgpt.select_per='client' is not one of sample, batch"),
        ({"shared_init": "normal"}, "sgpt.shared_init='normal' is not one of zeros, xavier"),
        ({"shared_length_at": "last"}, "sgpt.shared_length_at='last' is not one of every, first"),
        ({"shared_length": 0}, "sgpt.shared_length=0 must be at least 1"),
        ({"key_fallback_at_most": -1}, "sgpt.key_fallback_at_most=-1 must be >= 0"),
    ],
)
def test_bad_fidelity_options_name_the_valid_values(options, message):
    with pytest.raises(ConfigError, match=message):
        build_config("sgpt", [{"sgpt": options}])


@pytest.mark.parametrize("mode, tokens", [("insert", 2), ("replace", 1)])
def test_group_mode_keeps_every_blocks_group_output_or_only_the_last(mode, tokens):
    """The authors' code adds a group token at each block of U_G, and the head reads them all; the paper's Alg. 3
    feeds each block's group prompt in place of the previous block's group output, and the head reads one."""
    config = build_config("sgpt", [TINY, {"sgpt": {"groups": 2, "group_blocks": [1, 2], "group_mode": mode}}])
    method = get_method("sgpt").cls(config)
    model = build_model(config, method, 5)
    groups = torch.tensor([0, 1])
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    dynamic = {"group": model.extra["group_prompts"][groups]}
    _, sizes = model.run_blocks(model.embed(x), 0, len(model.vit.blocks), dynamic)
    assert sizes["group"] == tokens
    with torch.no_grad():
        assert method.logits(model, x, groups).shape == (2, 5)


def test_the_key_rows_a_client_leaves_out_are_those_the_aggregation_weighs_at_zero():
    state, (a, b) = two_clients()  # a chose g0 only; b chose both
    method = sgpt()
    assert {name: rows.tolist() for name, rows in method.rows_left_out(a).items()} == {KEYS: [False, True]}
    before = method.aggregate(1, state, [a, b]).params[KEYS]
    a.params[KEYS][1] = torch.tensor([-40.0, 40.0])  # a row a compressed uplink leaves out: nothing changes
    assert torch.equal(method.aggregate(1, state, [a, b]).params[KEYS], before)
    a.params[KEYS][0] = torch.tensor([-40.0, 40.0])  # a row it sends
    assert not torch.equal(method.aggregate(1, state, [a, b]).params[KEYS], before)
