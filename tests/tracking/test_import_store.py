"""``import_store``: what a run imports for its store while its set-up waits for the model's build creates nothing
(bad input found after it still leaves no store behind)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from raysim.tracking.mlflow import import_store
store = "mlflow.store.tracking.sqlalchemy_store"
before = store in sys.modules
import_store(sys.argv[1])
print(before, store in sys.modules)
"""


def test_a_sqlite_stores_modules_are_imported_and_no_file_is_created(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    shown = subprocess.run([sys.executable, "-c", PROBE, uri], capture_output=True, text=True, timeout=120, check=True)
    assert shown.stdout.split() == ["False", "True"]  # not imported by raysim's tracking module itself
    assert list(tmp_path.iterdir()) == []
