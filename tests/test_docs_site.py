"""The documentation site: ``mkdocs build --strict`` passes (a broken link or anchor fails it, as a page outside
the nav does), and its reference pages are generated from the code's declarations, every config key and method
option with its help."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import raysim
from raysim.base.settings import described
from raysim.config import SECTIONS
from raysim.core.registry import METHODS

ROOT = Path(__file__).resolve().parents[1]


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        str(config),
        "--site-dir",
        str(site),
    ]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}  # the checkout's code is documented
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", folder)
    assert result.returncode == 0, result.stderr
    return folder


def text_of(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text()


def test_the_site_builds_strict_with_generated_reference_pages(site):
    options, config, cli = (text_of(site, f"reference/{page}") for page in ("options", "config", "cli"))
    for name, info in METHODS.items():
        for entry in described(info.options):
            assert f"{info.options_key}.{entry['name']}" in options, (name, entry["name"])
    for section, cls in SECTIONS.items():
        for entry in described(cls):
            assert f"{section}.{entry['name']}" in config, (section, entry["name"])
    assert "raysim ls options METHOD" in cli and "Usage: raysim compare" in cli
    api = text_of(site, "reference/api")
    for name in raysim.__all__:  # each export rendered from its docstring, under its own anchor
        assert f'id="{raysim._EXPORTS[name]}.{name}"' in api, name
    assert "Class decorator for a method defined outside raysim" in api  # register's docstring, rendered
    assert "<code>raysim.core.training.local_train</code>" in api and not re.search(r":[a-z]+:<code>", api)


@pytest.mark.parametrize(
    "link, complaint",
    [
        ("other.md#no-such-heading", "does not contain an anchor '#no-such-heading'"),
        ("missing.md", "not found among documentation files"),
    ],
)
def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path, link, complaint):
    """The site's own validation settings, inherited, on two pages of which one links where nothing is."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n[a link]({link})\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nhooks: []\nnav: [index.md, other.md]\nexclude_docs: ''\n"
    )
    result = build(config, tmp_path / "site")
    assert result.returncode != 0 and complaint in result.stderr, result.stderr
