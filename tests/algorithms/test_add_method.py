"""docs/how-to/add-method.md's example, as a reader would follow it: its two code blocks written to a method package,
found by :func:`raysim.algorithms.declare_all`, listed with its option and run. A fresh interpreter, so that the
example never joins the registry of the tests beside it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "how-to" / "add-method.md"
BLOCK = re.compile(r"```python\n# algorithms/(\S+)\n(.*?)```", re.S)

RUN = """
import json, sys
import torch
import raysim.algorithms as algorithms
from raysim.config.listing import options_text
from raysim.testing.smoke import run_rounds, smoke_config

algorithms.__path__.append(sys.argv[1])
found = algorithms.declare_all([sys.argv[1]], algorithms.__name__)
final = {}
for method, layer in (("fedvpt", {}), ("soft-ce", {"soft-ce": {"temperature": 1.0}}), ("soft-ce", {})):
    _, _, state = run_rounds(smoke_config(method, layer))
    final[f"{method}{layer}"] = torch.cat([t.flatten() for t in state.params.values()])
plain, at_one, at_two = final.values()
print(json.dumps({
    "found": found,
    "listed": "temperature" in options_text("soft-ce") and "CE(logits / T, y)" in options_text("soft-ce"),
    "at_one_is_fedvpt": bool(torch.equal(plain, at_one)),
    "at_two_moves": not bool(torch.equal(plain, at_two)),
}))
"""


def test_the_guides_example_method_is_found_listed_and_runs(tmp_path):
    blocks = dict(BLOCK.findall(GUIDE.read_text()))
    assert set(blocks) == {"soft_ce/__init__.py", "soft_ce/method.py"}
    for name, code in blocks.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(code)
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"found": ["soft_ce"], "listed": True, "at_one_is_fedvpt": True, "at_two_moves": True}
