"""The group-prompt family's helpers (algorithms/_group_prompts.py): block layouts scaled from the paper's 12-block
ViT, their checks, and the cached query."""

import pytest
import torch

from raysim.algorithms import _group_prompts as sel
from raysim.core.errors import ConfigError


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
