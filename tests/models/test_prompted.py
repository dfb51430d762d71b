"""PromptedViT: equality with timm's forward, prompt insertion semantics, pooling, training state."""

import math

import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.base.prompts import PromptSlot, PromptSpec
from raysim.models.backbones import DEFAULT_BACKBONE, build_backbone
from raysim.models.prompted import TIMM_INTERNALS, PromptedViT

CLASSES = 5


def small_vit(seed=0, **kwargs):
    """A tiny timm ViT: 16x16 input, 4x4 patches (16 patch tokens), width 32, 4 blocks; global RNG untouched."""
    from timm.models.vision_transformer import VisionTransformer  # timm only after raysim.models (shim)

    args = dict(img_size=16, patch_size=4, embed_dim=32, depth=4, num_heads=2, num_classes=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return VisionTransformer(**{**args, **kwargs}).eval()


def vit_tiny_32px():
    """timm's registered vit_tiny_patch16_224 (12 blocks, width 192) at 32x32 input: 4 patches."""
    import timm

    return timm.create_model("vit_tiny_patch16_224", img_size=32, num_classes=0).eval()


def images(vit, batch=2, seed=0):
    size = vit.patch_embed.img_size[0]
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def wrap(vit, *slots, seed=0, **spec):
    return PromptedViT(vit, PromptSpec(slots=tuple(slots), **spec), CLASSES, seed=seed)


def test_timm_internals_still_exist():
    vit = small_vit()
    for name in TIMM_INTERNALS:
        assert hasattr(vit, name), name
    assert tuple(vit.patch_embed.patch_size) == (4, 4)
    assert vit.num_prefix_tokens == 1 and vit.has_class_token


@pytest.mark.parametrize(
    "make",
    [
        lambda: build_backbone(DEFAULT_BACKBONE),
        vit_tiny_32px,
        lambda: small_vit(),
        lambda: small_vit(global_pool="avg"),
        lambda: small_vit(reg_tokens=2),
        lambda: small_vit(reg_tokens=4, no_embed_class=True, global_pool="avg"),
        lambda: small_vit(class_token=False, global_pool="avg"),
    ],
    ids=["raysim-default", "vit_tiny-32px", "small", "avg-pool", "reg-tokens", "reg-no-embed-class", "no-cls"],
)
def test_no_slots_equals_timm_forward(make):
    model = wrap(make())
    x = images(model.vit)
    assert torch.allclose(model(x), model.vit(x), rtol=0, atol=1e-6)


def reference_features(vit, x, entries):
    """Hand replay: ``entries[b]`` lists (tokens [B, L, D], replace_count) to add after the prefix before block b."""
    tokens = vit._pos_embed(vit.patch_embed(x))
    prefix = vit.num_prefix_tokens
    for index, block in enumerate(vit.blocks):
        for new, replaced in entries.get(index, []):
            tokens = torch.cat([tokens[:, :prefix], new, tokens[:, prefix + replaced :]], dim=1)
        tokens = block(tokens)
    return vit.norm(tokens)


def test_insert_grows_sequence_and_matches_hand_replay():
    model = wrap(small_vit(), PromptSlot("shallow", blocks=(0, 2), length=3, init="normal"))
    x = images(model.vit)
    tokens, slices = model.forward_features(x)
    assert tokens.shape == (2, 1 + 16 + 2 * 3, 32)
    assert slices == {"shallow": slice(1, 7)}
    prompt = model.prompts["shallow"].expand(2, -1, -1, -1)
    expected = reference_features(model.vit, x, {0: [(prompt[:, 0], 0)], 2: [(prompt[:, 1], 0)]})
    assert torch.allclose(tokens, expected, atol=1e-6)


def test_replace_keeps_sequence_and_matches_hand_replay():
    model = wrap(small_vit(), PromptSlot("deep", blocks=(0, 1, 2, 3), length=2, mode="replace"))
    x = images(model.vit)
    tokens, slices = model.forward_features(x)
    assert tokens.shape == (2, 1 + 16 + 2, 32)
    assert slices == {"deep": slice(1, 3)}
    prompt = model.prompts["deep"].expand(2, -1, -1, -1)
    entries = {0: [(prompt[:, 0], 0)], **{b: [(prompt[:, b], 2)] for b in (1, 2, 3)}}
    assert torch.allclose(tokens, reference_features(model.vit, x, entries), atol=1e-6)


def test_several_slots_stay_contiguous_in_spec_order():
    model = wrap(
        small_vit(),
        PromptSlot("deep", blocks=(1, 3), length=2, mode="replace"),
        PromptSlot("shared", blocks=(0, 2), length=1),
    )
    tokens, slices = model.forward_features(images(model.vit))
    assert slices == {"deep": slice(1, 3), "shared": slice(3, 5)}
    assert tokens.shape[1] == 1 + 2 + 2 + 16


def test_zero_prompts_still_change_outputs_through_attention():
    vit = small_vit()
    x = images(vit)
    plain = wrap(small_vit())(x)
    prompted = wrap(vit, PromptSlot("shallow", blocks=(0,), init="zeros"))
    assert torch.count_nonzero(prompted.prompts["shallow"]) == 0
    assert not torch.allclose(prompted(x), plain)


def test_backbone_pooling_ignores_prompt_tokens_in_avg_pool():
    model = wrap(small_vit(global_pool="avg"), PromptSlot("shallow", blocks=(0,), length=4))
    tokens, slices = model.forward_features(images(model.vit))
    patches = tokens[:, slices["shallow"].stop :]
    vit = model.vit
    assert torch.allclose(model.forward_head(tokens, slices), vit.head(vit.fc_norm(patches.mean(1))), atol=1e-6)


def test_cls_and_cls_plus_prompts_pooling_by_hand():
    slots = (PromptSlot("deep", blocks=(0, 1), length=2, mode="replace"), PromptSlot("shared", blocks=(2,), length=3))
    x = images(small_vit())
    for pooling in ("cls", "cls+prompts"):
        model = wrap(small_vit(), *slots, head_pooling=pooling)
        tokens, slices = model.forward_features(x)
        picked = [tokens[:, :1]]
        if pooling == "cls+prompts":
            picked += [tokens[:, slices["deep"]], tokens[:, slices["shared"]]]
        pooled = torch.cat(picked, dim=1).mean(dim=1)
        assert torch.cat(picked, dim=1).shape[1] == (1 if pooling == "cls" else 6)
        assert torch.allclose(model(x), model.vit.head(pooled), atol=1e-6)


def test_dynamic_slot_equals_static_slot_with_same_tokens():
    static = wrap(small_vit(), PromptSlot("group", blocks=(0, 2), length=2, init="normal"))
    dynamic = wrap(small_vit(), PromptSlot("group", blocks=(0, 2), length=2, dynamic=True))
    assert "group" not in dynamic.prompts
    x = images(static.vit)
    given = static.prompts["group"].detach().expand(2, -1, -1, -1)
    assert torch.allclose(dynamic(x, {"group": given}), static(x), atol=1e-6)


def test_omitted_dynamic_slot_runs_without_it():
    prompted = wrap(small_vit(), PromptSlot("group", blocks=(0,), dynamic=True), head_pooling="backbone")
    plain = wrap(small_vit(), head_pooling="backbone")
    x = images(plain.vit)
    assert torch.allclose(prompted(x), plain(x), atol=1e-6)


def test_dynamic_slot_errors():
    model = wrap(small_vit(), PromptSlot("group", blocks=(0,), dynamic=True))
    x = images(model.vit)
    with pytest.raises(ValueError, match="must have shape \\(2, 1, 1, 32\\)"):
        model(x, {"group": torch.zeros(2, 1, 2, 32)})
    with pytest.raises(ValueError, match="dynamic slots \\['group'\\] only, got \\['group', 'other'\\]"):
        model(x, {"group": torch.zeros(2, 1, 1, 32), "other": torch.zeros(1)})


def test_prompt_parameter_shapes_and_inits():
    vit = small_vit()
    model = wrap(
        vit,
        PromptSlot("x", blocks=(0, 1, 3), length=5, init="xavier"),
        PromptSlot("z", blocks=(2,), init="zeros"),
        PromptSlot("n", blocks=(0, 1), length=50, init="normal"),
    )
    assert model.prompts["x"].shape == (3, 5, 32)
    bound = math.sqrt(6 / (3 * 4 * 4 + 32))  # VPT: patch_dim = channels * patch * patch
    assert model.prompts["x"].abs().max() <= bound
    assert model.prompts["x"].abs().max() > bound / 2
    assert torch.count_nonzero(model.prompts["z"]) == 0
    assert 0.01 < model.prompts["n"].std() < 0.03


def grads_after_backward(model):
    model(images(model.vit)).square().mean().backward()
    return {name for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("train_head", [True, False])
def test_gradients_reach_only_trainable_parameters(train_head):
    model = wrap(small_vit(), PromptSlot("deep", blocks=(0, 1), mode="replace"), train_head=train_head)
    names = model.trainable_names()
    expected = ["prompts.deep"] + (["vit.head.bias", "vit.head.weight"] if train_head else [])
    assert names == expected
    assert grads_after_backward(model) == set(expected)


def test_full_fine_tuning_trains_everything():
    model = wrap(small_vit(), train_backbone=True)
    names = model.trainable_names()
    assert names == sorted(name for name, _ in model.named_parameters())
    assert grads_after_backward(model) == set(names)


def test_trainable_state_round_trip():
    slot = PromptSlot("deep", blocks=(0, 2), length=2)
    model, other = wrap(small_vit(), slot, seed=0), wrap(small_vit(), slot, seed=1)
    state = model.trainable_state()
    assert sorted(state) == model.trainable_names()
    assert all(t.is_contiguous() and not t.requires_grad for t in state.values())
    state["prompts.deep"].add_(1.0)  # a copy: the model is untouched
    assert not torch.equal(state["prompts.deep"], model.prompts["deep"])
    other.load_trainable(state)
    for name, value in other.trainable_state().items():
        assert torch.equal(value, state[name])


def test_load_trainable_errors_name_the_keys():
    model = wrap(small_vit(), PromptSlot("deep", blocks=(0,)))
    state = model.trainable_state()
    with pytest.raises(ValueError, match="missing prompts.deep"):
        model.load_trainable({k: v for k, v in state.items() if k != "prompts.deep"})
    with pytest.raises(ValueError, match="unexpected extra"):
        model.load_trainable({**state, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"vit.head.bias \(3,\) vs \(5,\)"):
        model.load_trainable({**state, "vit.head.bias": torch.zeros(3)})


def test_initialisation_is_deterministic_by_seed_and_leaves_global_rng_alone():
    slot = PromptSlot("deep", blocks=(0, 1))
    first, same, other = (wrap(small_vit(), slot, seed=s).trainable_state() for s in (7, 7, 8))
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first)
    vit = small_vit()
    before = torch.get_rng_state()
    wrap(vit, slot, seed=3)
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize(
    "slots, spec, message",
    [
        ((PromptSlot("a", blocks=(4,)),), {}, r"backbone depth 4\): blocks \(4,\) must be .* in \[0, 4\)"),
        ((PromptSlot("a", blocks=(-1,)),), {}, r"in \[0, 4\)"),
        ((PromptSlot("a", blocks=()),), {}, "must be non-empty"),
        ((PromptSlot("a", blocks=(2, 1)),), {}, "strictly increasing"),
        ((PromptSlot("a", blocks=(0,)), PromptSlot("a", blocks=(1,))), {}, "used twice"),
        ((PromptSlot("a.b", blocks=(0,)),), {}, "identifier"),
        ((PromptSlot("a", blocks=(0,), length=0),), {}, "length must be a whole number at least 1, got 0"),
        ((PromptSlot("a", blocks=(0,), length=2.0),), {}, "length must be a whole number at least 1, got 2.0"),
        ((PromptSlot("a", blocks=(0.5,)),), {}, r"blocks \(0.5,\) must be non-empty, strictly increasing indices"),
        ((PromptSlot("a", blocks=(True,)),), {}, r"blocks \(True,\) must be non-empty"),
        ((PromptSlot("keys", blocks=(0,)),), {}, "no attribute of a module"),
        ((PromptSlot("training", blocks=(0,)),), {}, "no attribute of a module"),
        ((PromptSlot("a", blocks=(0,), mode="swap"),), {}, "unknown mode 'swap'; valid: insert, replace"),
        ((PromptSlot("a", blocks=(0,), init="ones"),), {}, "unknown init 'ones'"),
        ((), {"head_pooling": "mean"}, "unknown head_pooling 'mean'; valid: backbone, cls, cls\\+prompts"),
    ],
)
def test_invalid_specs_give_one_line_config_errors(slots, spec, message):
    with pytest.raises(ConfigError, match=message) as caught:
        wrap(small_vit(), *slots, **spec)
    assert "\n" not in str(caught.value)


def test_cls_pooling_needs_a_class_token():
    with pytest.raises(ConfigError, match="needs a class token"):
        wrap(small_vit(class_token=False, global_pool="avg"), head_pooling="cls")


def test_blocks_run_in_pieces_equal_the_full_forward():
    model = wrap(
        small_vit(),
        PromptSlot("shared", blocks=(0,), length=2, init="normal"),
        PromptSlot("group", blocks=(2,), dynamic=True),
        head_pooling="cls+prompts",
    )
    x = images(model.vit)
    group = {"group": torch.randn(2, 1, 1, 32, generator=torch.Generator().manual_seed(1))}
    prefix = model.run_blocks(model.embed(x), 0, 2)
    assert prefix[1] == {"shared": 2, "group": 0}
    branched = model.head_from(model.run_blocks(prefix, 2, 4, group))
    assert torch.allclose(branched, model(x, group), atol=1e-6)
    assert prefix[1] == {"shared": 2, "group": 0}  # a branch does not change the prefix's bookkeeping


def test_head_pooling_over_named_slots():
    model = wrap(
        small_vit(),
        PromptSlot("shared", blocks=(0,), init="normal"),
        PromptSlot("group", blocks=(1,), dynamic=True),
        head_pooling="cls",
    )
    x = images(model.vit)
    group = {"group": torch.randn(2, 1, 1, 32, generator=torch.Generator().manual_seed(1))}
    tokens, slices = model.forward_features(x, group)
    pooled = torch.cat([tokens[:, :1], tokens[:, slices["group"]]], dim=1).mean(dim=1)
    assert torch.allclose(
        model.head_from(model.run_blocks(model.embed(x), 0, 4, group), pool=("group",)),
        model.vit.head(pooled),
        atol=1e-6,
    )
    assert torch.allclose(model.forward_head(tokens, slices, pool=()), model.vit.head(tokens[:, 0]), atol=1e-6)


def test_extras_are_registered_and_trainable_only_with_grad():
    extras = {
        "bank": torch.nn.Parameter(torch.ones(3, 32)),
        "fixed": torch.nn.Parameter(torch.zeros(3, 32), requires_grad=False),
    }
    model = PromptedViT(small_vit(), PromptSpec(), CLASSES, extras=extras)
    assert "extra.bank" in model.trainable_names() and "extra.fixed" not in model.trainable_names()
    assert torch.equal(model.trainable_state()["extra.bank"], torch.ones(3, 32))


def test_training_only_freezes_the_others_and_restores():
    model = wrap(small_vit(), PromptSlot("shared", blocks=(0,)))
    params = dict(model.named_parameters())
    with model.training_only({"prompts.shared"}):
        assert [n for n in model.trainable_names() if params[n].requires_grad] == ["prompts.shared"]
    assert all(params[n].requires_grad for n in model.trainable_names())
    with pytest.raises(ValueError, match="not trainable"), model.training_only({"vit.cls_token"}):
        pass
