"""The user's own partition knobs against the partition that reads them: ``--set data.alpha=0.1`` under
``--partition pathological`` would change nothing, so it is refused in one line. Presets and recorded configs are not
checked: a preset's alpha stays behind, unread, where a flag picks another partition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raysim.base.errors import ConfigError
from raysim.data.partition import PARTITIONERS


def refuse_unread_partition_keys(given: list[Mapping[str, Any]], partition: str) -> None:
    """Refuse a ``data.*`` partition knob that the user's flags or ``--set`` (``given``, as config layers)
    set and that ``partition`` (the runs') does not read."""
    owner = {key: name for name, partitioner in PARTITIONERS.items() for key in partitioner.knobs}
    read = PARTITIONERS[partition].knobs
    for layer in given:
        for key in layer.get("data") or {}:
            if key in owner and key not in read:
                raise ConfigError(
                    f"data.{key} is the {owner[key]} partition's, and the partition here is {partition} (reads "
                    f"{', '.join(read) or 'nothing'}): it would change nothing; drop data.{key}, or set "
                    f"data.partition={owner[key]}"
                )
