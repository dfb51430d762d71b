"""Capacity tiers: the grammar, which prompt blocks each tier trains, and each client's tier drawn from the run seed
or read from a trace's ``tier`` column (docs/systems.md)."""

from __future__ import annotations

import numpy as np
import pytest

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.systems.profiles import draw_profiles
from raysim.systems.tiers import parse_tiers, trains_block


@pytest.mark.parametrize(
    "tier, trained",
    [
        ("head", [False] * 6),
        ("first-2", [True, True, False, False, False, False]),
        ("last-1", [False] * 5 + [True]),
        ("last-9", [True] * 6),
        ("all", [True] * 6),
    ],
)
def test_a_tier_trains_the_prompts_of_its_blocks(tier, trained):
    assert [trains_block(tier, block, depth=6) for block in range(6)] == trained


@pytest.mark.parametrize("text", ["half", "first-0", "last-", "first2", "head,,all", "ALL"])
def test_a_bad_tier_is_one_line_naming_the_valid_ones(text):
    with pytest.raises(ConfigError, match="is not a capacity tier; a tier is head, first-K, last-K or all"):
        parse_tiers(text)


def test_tiers_are_drawn_per_client_from_the_run_seed():
    systems = build_config("fedvpt", [{"systems": {"tiers": "head, last-2,all,all"}}]).systems
    a, b = draw_profiles(systems, 400, seed=3), draw_profiles(systems, 400, seed=3)
    assert a.tiered and np.array_equal(a.tier, b.tier)
    assert not np.array_equal(a.tier, draw_profiles(systems, 400, seed=4).tier)
    counts = {tier: int((a.tier == tier).sum()) for tier in ("head", "last-2", "all")}
    assert sum(counts.values()) == 400 and 60 < counts["head"] < 140 and 140 < counts["all"] < 260  # all listed twice
    speeds = draw_profiles(build_config("fedvpt", [{"systems": {"speed": "lognormal:1,1"}}]).systems, 400, seed=3)
    with_tiers = build_config("fedvpt", [{"systems": {"speed": "lognormal:1,1", "tiers": "head,all"}}]).systems
    assert np.array_equal(draw_profiles(with_tiers, 400, seed=3).speed, speeds.speed)  # tiers move no other draw
    assert not speeds.tiered and set(speeds.tier) == {"all"}


def test_a_trace_tier_column_overrides_the_draw_and_empty_means_all(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("client,tier\n0,head\n1,\n2,first-1\n")
    systems = build_config("fedvpt", [{"systems": {"trace": str(trace), "tiers": "last-1"}}]).systems
    assert draw_profiles(systems, 5, seed=0).tier.tolist() == ["head", "all", "first-1", "head", "all"]
    trace.write_text("client,tier\n0,most\n")
    with pytest.raises(ConfigError, match="column tier: 'most' is not a capacity tier"):
        draw_profiles(systems, 5, seed=0)


def test_only_methods_that_train_by_tier_accept_tiers():
    with pytest.raises(ConfigError, match="sgpt does not train by capacity tier; methods that do: fedprox, fedvpt"):
        build_config("sgpt", [{"systems": {"tiers": "head,all"}}])
    assert not build_config("fedvpt-d", [{"systems": {"tiers": "head,all"}}]).clocked  # tiers alone cost no time
