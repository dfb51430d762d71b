"""The group-prompt family's helpers (algorithms/_group_prompts.py): block layouts scaled from the paper's 12-block
ViT, their checks, and the cached query."""

import pytest
import torch

from raysim.algorithms import _group_prompts as sel
from raysim.base.errors import ConfigError


def test_paper_blocks_scale_the_12_block_layout():
    assert sel.paper_blocks(12, 0, 3) == (0, 1, 2) and sel.paper_blocks(12, 3, 3) == (3, 4, 5)
    assert sel.paper_blocks(6, 0, 3) == (0, 1) and sel.paper_blocks(6, 3, 3) == (2, 3)
    assert sel.paper_blocks(6, 6, 1) == (3,) and sel.paper_blocks(4, 3, 3) == (1,)


def test_check_blocks_names_the_range():
    assert sel.check_blocks("sgpt.group_blocks", (3, 1), 6) == (1, 3)
    with pytest.raises(ConfigError, match=r"sgpt.group_blocks=\[2, 6\] must be distinct block indices in \[0, 5\]"):
        sel.check_blocks("sgpt.group_blocks", (2, 6), 6)


def test_backbone_query_is_relu_l2_of_the_frozen_class_token():
    from tests.models.test_prompted import images, small_vit

    vit = small_vit()
    x = images(vit, batch=3)
    query = sel.backbone_query(vit, x, len(vit.blocks))
    expected = torch.nn.functional.normalize(torch.relu(vit.forward_features(x)[:, 0]), dim=1)
    assert torch.allclose(query, expected, atol=1e-6)
    assert torch.allclose(query.norm(dim=1), torch.ones(3)) and (query >= 0).all()
    early = sel.backbone_query(vit, x, 1)  # after block 1, no final norm
    tokens = vit.blocks[0](vit.norm_pre(vit._pos_embed(vit.patch_embed(x))))
    assert torch.allclose(early, torch.nn.functional.normalize(torch.relu(tokens[:, 0]), dim=1), atol=1e-6)


def test_query_depth_reads_a_layer_as_the_paper_or_the_authors_code():
    assert sel.query_depth(5, 12, "paper") == (5, False)  # cls_5: after block 5, no final norm
    assert sel.query_depth(5, 12, "code") == (6, True)  # blocks[:6] (break at 0-based 5), then the norm
    assert sel.query_depth(12, 12, "paper") == sel.query_depth(12, 12, "code") == (12, True)
    assert sel.query_depth(11, 12, "code") == (12, True)


def manual_query(vit, x, blocks, norm, relu=True):
    """ReLU (unless ``relu`` is False) + L2 of the class token after the first ``blocks`` blocks (and the final
    norm), written out."""
    tokens = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
    for b in range(blocks):
        tokens = vit.blocks[b](tokens)
    tokens = vit.norm(tokens) if norm else tokens
    return torch.nn.functional.normalize(torch.relu(tokens[:, 0]) if relu else tokens[:, 0], dim=1)


def test_backbone_query_runs_the_blocks_and_norm_of_its_reading():
    from tests.models.test_prompted import images, small_vit

    vit = small_vit()
    x = images(vit, batch=3)
    ran = []
    hooks = [m.register_forward_hook(lambda m, *_: ran.append(m)) for m in (*vit.blocks, vit.norm)]
    paper = sel.backbone_query(vit, x, 2, reading="paper")
    assert ran == [vit.blocks[0], vit.blocks[1]]  # two blocks, no final norm
    ran.clear()
    code = sel.backbone_query(vit, x, 2, reading="code")
    assert ran == [vit.blocks[0], vit.blocks[1], vit.blocks[2], vit.norm]  # blocks[:3], then the final norm
    for hook in hooks:
        hook.remove()
    assert torch.allclose(paper, manual_query(vit, x, 2, norm=False), atol=1e-6)
    assert torch.allclose(code, manual_query(vit, x, 3, norm=True), atol=1e-6)
    assert not torch.allclose(code, manual_query(vit, x, 3, norm=False), atol=1e-3)  # the norm matters


def nano(method, **options):
    from raysim.config import build_config
    from raysim.core.registry import get_method
    from raysim.models.factory import build_model

    backbone = {"model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False}}
    config = build_config(method, [backbone, {method: {"groups": 2, **options}}])
    instance = get_method(method).cls(config)
    return instance, build_model(config, instance, 3)


def test_sgpt_select_layer_as_decides_the_cached_query():
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    for reading, blocks, norm in (("paper", 1, False), ("code", 2, True)):
        method, model = nano("sgpt", select_layer=1, select_layer_as=reading)
        assert torch.allclose(
            method.row_features(model, x)["query"], manual_query(model.vit, x, blocks, norm), atol=1e-6
        )


@pytest.mark.parametrize("query", ["relu", "plain"])
def test_fgpt_select_layer_as_and_query_decide_the_cached_query(query):
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    for reading, blocks, norm in (("paper", 1, False), ("code", 2, True)):
        method, model = nano("fgpt", select_layer=1, select_layer_as=reading, query=query)
        expected = manual_query(model.vit, x, blocks, norm, relu=query == "relu")
        assert torch.allclose(method.row_features(model, x)["query"], expected, atol=1e-6)


def test_fgpt_select_layer_as_names_its_valid_values():
    from raysim.config import build_config

    with pytest.raises(ConfigError, match="fgpt.select_layer_as='authors' is not one of paper, code"):
        build_config("fgpt", [{"fgpt": {"select_layer_as": "authors"}}])
