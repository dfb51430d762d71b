"""This process's memory as tests measure it (Linux ``/proc``)."""

from __future__ import annotations

from pathlib import Path


def resident_kb(path: str | Path) -> int:
    """This process's resident kB of its maps of the file ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total
