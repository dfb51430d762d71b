"""Capacity tiers: what a client can afford to train and send (docs/systems.md, "Capacity tiers").

A tier names the prompt blocks a client trains; the classifier head always trains:

- ``head``: the head only (a linear probe on the prompted model it received);
- ``first-K``: prompts entering the first K blocks of the backbone (VPT-deep's rows 0..K-1);
- ``last-K``: prompts entering the last K blocks (the cheapest backward: gradients stop K blocks below the head);
- ``all``: every trainable tensor, as without tiers.

Any other trainable tensor (a method's own ``extra.*`` tensors, backbone weights) trains under ``all`` only. A
client sends only what it trained, and the server averages each row of each tensor over the clients that trained it
(:func:`raysim.ops.aggregate.row_masked_mean`). Pure Python: no torch here.
"""

from __future__ import annotations

import re

from raysim.base.errors import ConfigError

ALL = "all"
_TIER = re.compile(r"^(head|all|(first|last)-([1-9][0-9]*))$")
EXAMPLE = "head, first-K, last-K or all (K >= 1 blocks), e.g. systems.tiers=head,last-2,all"


def check_tier(text: str, where: str = "systems.tiers") -> str:
    """``text`` if it names a tier, else a one-line ConfigError saying what does."""
    if not _TIER.match(str(text)):
        raise ConfigError(f"{where}: {text!r} is not a capacity tier; a tier is {EXAMPLE}")
    return str(text)


def parse_tiers(text: str) -> tuple[str, ...]:
    """``'head,last-2,all'`` -> ('head', 'last-2', 'all'); a name given twice is drawn twice as often."""
    tiers = tuple(part.strip() for part in str(text).split(","))
    return tuple(check_tier(tier) for tier in tiers)


def trains_block(tier: str, block: int, depth: int) -> bool:
    """Whether a client of ``tier`` trains the prompts entering ``block`` (0-based) of a ``depth``-block backbone."""
    if tier == ALL:
        return True
    if tier == "head":
        return False
    side, k = tier.split("-")
    return block < int(k) if side == "first" else block >= depth - int(k)
