"""What a command printed itself, without the lines Ray forwards from its workers.

Ray prefixes each line a worker prints with its source, coloured on a terminal: ``(Coordinator pid=12) ...``,
``\\x1b[36m(_trial pid=9376)\\x1b[0m ...``, ``(pid=gcs_server) ...``, ``(raylet, ip=...) ...``,
``(autoscaler +2s) ...``. They arrive asynchronously, so a test comparing a command's own lines drops them: an earlier
test's actor log, or a finished worker's interpreter-shutdown noise ("Exception ignored in: <function WeakSet...>"),
can land between any two of ours.
"""

from __future__ import annotations

import re

RAY_FORWARDED = re.compile(r"^(\x1b\[\d+m)?\(((\S+ )?pid=|raylet\b|autoscaler\b)")


def own_lines(text: str) -> list[str]:
    """The lines of ``text`` not forwarded by Ray from a worker."""
    return [line for line in text.strip().splitlines() if not RAY_FORWARDED.search(line)]
