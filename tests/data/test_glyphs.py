"""Generated glyph datasets: fonts, determinism, the three benchmarks through their cache, the pretraining corpus."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from raysim.base.errors import ConfigError
from raysim.config import DataConfig
from raysim.data import glyphs
from raysim.data.sources import _to_numpy, fixed_test_split

FONTS = {f.name: f for f in glyphs.bundled_fonts()}


def test_bundled_fonts_are_the_faces_that_draw_latin_and_digits():
    fonts = glyphs.bundled_fonts()
    assert len(fonts) == 21 and fonts == sorted(fonts, key=lambda p: p.name)
    assert all(f.is_file() for f in fonts)
    assert {"DejaVuSans.ttf", "DejaVuSansMono.ttf", "DejaVuSerif.ttf", "STIXGeneral.ttf", "cmr10.ttf"} <= set(FONTS)
    assert not {"LastResortHE-Regular.ttf", "cmex10.ttf", "cmsy10.ttf", "DejaVuSansDisplay.ttf"} & set(FONTS)
    assert {glyphs._family(f) for f in fonts} == {"mono", "sans", "serif"}


def test_covers_rejects_remapped_and_missing_glyphs():
    assert glyphs.covers(FONTS["DejaVuSans.ttf"], "<")
    assert not glyphs.covers(FONTS["cmr10.ttf"], "<")  # TeX encoding: '<' is an inverted '!'
    assert glyphs.covers(FONTS["DejaVuSans.ttf"], "א")
    assert not glyphs.covers(FONTS["DejaVuSerif.ttf"], "א")  # no Hebrew in DejaVu Serif
    assert not glyphs.covers(FONTS["STIXGeneral.ttf"], "ա")  # no Armenian in STIX


def _small_glyphs62(seed: int) -> np.ndarray:
    plan, _ = glyphs._glyphs62(seed, per_writer=1)
    return glyphs._render_ids(plan, range(0, len(plan), 7))


def test_images_are_a_function_of_the_seed():
    first, again, other = _small_glyphs62(0), _small_glyphs62(0), _small_glyphs62(1)
    assert first.shape[1:] == (32, 32, 3) and first.dtype == np.uint8
    assert np.array_equal(first, again)
    assert all(not np.array_equal(a, b) for a, b in zip(first, other))
    assert (first.max(axis=(1, 2, 3)).astype(int) - first.min(axis=(1, 2, 3)) > 60).all()  # every glyph drawn


def test_rendering_does_not_depend_on_how_work_is_split(ray_session, monkeypatch):
    plan, _ = glyphs._five_sources(seed=3, per_class=1)
    monkeypatch.setattr(glyphs, "BLOCK_ROWS", 13)
    assert np.array_equal(glyphs._render_all(plan), glyphs._render_ids(plan, range(len(plan))))


@pytest.fixture(scope="module")
def generated(ray_session, tmp_path_factory):
    """All three datasets read twice through their read functions, in a fresh cache: (arrays, info, mtime)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAYSIM_CACHE", str(tmp_path_factory.mktemp("cache")))
        out = {}
        for name, (_, read) in glyphs.GLYPH_SOURCES.items():
            ds, info = read(DataConfig())
            path = glyphs.cached_path(name)
            out[name] = (_to_numpy(ds), info, path, path.stat().st_mtime_ns)
        yield out


@pytest.mark.parametrize("name", ["glyphs62", "digits5", "five-sources"])
def test_second_read_uses_the_cache(generated, name, caplog):
    arrays, _, path, mtime = generated[name]
    with caplog.at_level(logging.INFO, logger=glyphs.__name__):
        ds, _ = glyphs.GLYPH_SOURCES[name][1](DataConfig())
    again = _to_numpy(ds)
    assert f"reading cached {name}" in caplog.text
    assert path.stat().st_mtime_ns == mtime and path.name.startswith(f"{name}-v{glyphs.FORMAT_VERSION}-")
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(name)] == [path.name]  # no temp files left
    assert all(np.array_equal(arrays[key], again[key]) for key in arrays)


def test_a_cached_read_needs_no_ray_data(generated, tmp_path):
    """A run that finds the dataset cached reads it with pyarrow alone (Ray Data, which registers the image
    column's tensor type, is not imported): the same arrays as the generating process read, images uint8."""
    arrays, _, path, _ = generated["digits5"]
    code = (
        "import sys, numpy as np\n"
        "from raysim.config import DataConfig\n"
        "from raysim.data import glyphs\n"
        "arrays, _ = glyphs.read_digits5(DataConfig())\n"
        "assert not [m for m in sys.modules if m.startswith('ray.data')]\n"
        f"np.savez({str(tmp_path / 'read.npz')!r}, **arrays)\n"
    )
    env = {**os.environ, "RAYSIM_CACHE": str(path.parent)}
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    read = np.load(tmp_path / "read.npz")
    assert read["image"].dtype == np.uint8 and read["image"].shape == arrays["image"].shape
    assert sorted(read.files) == sorted(arrays) and all(np.array_equal(read[key], arrays[key]) for key in arrays)


@pytest.mark.parametrize("name", ["glyphs62", "digits5", "five-sources"])
def test_rows_and_split(generated, name):
    arrays, info, _, _ = generated[name]
    n = len(arrays["label"])
    assert arrays["image"].shape == (n, 32, 32, 3) and arrays["image"].dtype == np.uint8
    assert arrays["label"].dtype == np.int64 and arrays["domain"].dtype == np.int64
    assert arrays["is_test"].dtype == bool
    plan, _ = glyphs._PLANS[name]()
    assert np.array_equal(arrays["label"], plan.label) and np.array_equal(arrays["domain"], plan.domain)  # row order
    assert np.array_equal(arrays["is_test"], fixed_test_split(arrays["label"], arrays["domain"]))
    assert info.image_shape == (32, 32, 3) and len(info.class_names) == info.num_classes
    assert np.array_equal(np.unique(arrays["label"]), np.arange(info.num_classes))
    assert np.array_equal(np.unique(arrays["domain"]), np.arange(info.num_domains))
    assert len(info.domain_names) == info.num_domains
    assert f"{n:,} images" in glyphs.GLYPH_SOURCES[name][0]


def test_glyphs62_every_font_writes_every_character(generated):
    arrays, info, _, _ = generated["glyphs62"]
    assert info.num_classes == 62 and "".join(info.class_names) == glyphs.ALNUM
    assert info.domain_names == tuple(f.stem for f in glyphs.bundled_fonts())
    cells = np.bincount(arrays["domain"] * 62 + arrays["label"], minlength=62 * info.num_domains)
    assert (cells == glyphs.GLYPHS62_PER_WRITER).all()


def test_digits5_every_domain_has_every_digit(generated):
    from sklearn.datasets import load_digits

    arrays, info, _, _ = generated["digits5"]
    assert info.num_classes == 10 and info.num_domains == 5
    cells = np.bincount(arrays["domain"] * 10 + arrays["label"], minlength=50)
    assert (cells == glyphs.DIGITS5_PER_CELL).all()
    real = arrays["image"][arrays["domain"] == 0]
    upsampled = {glyphs._real_digit(i, 32).tobytes() for i in range(len(load_digits().images))}
    assert {image.tobytes() for image in real} <= upsampled  # domain 0 is scikit-learn's handwritten digits
    assert len({image.tobytes() for image in real}) == len(real)


def test_digits5_font_domains_draw_with_their_family():
    plan, _ = glyphs._digits5(per_cell=21)
    fonts = [Path(f) for f in plan.fonts]
    for domain, family in ((1, "serif"), (2, "mono"), (3, "sans")):
        used = {fonts[f] for f in plan.font[plan.domain == domain]}
        assert {glyphs._family(f) for f in used} == {family} and len(used) >= 3
    assert len(set(plan.font[plan.domain == 4])) == len(fonts)


def test_five_sources_have_disjoint_label_ranges(generated):
    arrays, info, _, _ = generated["five-sources"]
    sizes = [10, 26, 26, len(glyphs.SYMBOLS), 10]
    assert info.num_classes == sum(sizes) == 90 and info.num_domains == 5
    assert 15 <= len(glyphs.SYMBOLS) <= 20
    start = 0
    for domain, size in enumerate(sizes):
        assert set(arrays["label"][arrays["domain"] == domain]) == set(range(start, start + size))
        start += size
    assert (np.bincount(arrays["label"]) == glyphs.FIVE_SOURCES_PER_CLASS).all()


def test_pretrain_corpus_shapes_and_determinism(ray_session, monkeypatch):
    images, labels, chars = glyphs.pretrain_corpus(2, seed=0, size=16)
    assert 150 <= len(chars) <= 300 and len(set(chars)) == len(chars)
    assert images.shape == (2 * len(chars), 16, 16, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and (np.bincount(labels) == 2).all()
    monkeypatch.setattr("ray.is_initialized", lambda: False)  # in this process instead of Ray Data
    same, _, _ = glyphs.pretrain_corpus(2, seed=0, size=16)
    other, _, _ = glyphs.pretrain_corpus(2, seed=1, size=16)
    assert np.array_equal(images, same)
    assert (images != other).any(axis=(1, 2, 3)).all()
    with pytest.raises(ConfigError, match="even"):
        glyphs.pretrain_corpus(2, seed=0, size=15)


def test_pretrain_classes_are_disjoint_from_the_benchmarks():
    chars = glyphs.pretrain_chars()
    assert not set(chars) & set(glyphs.BENCHMARK_CHARS)
    assert not set(chars) & set("ΑΒΕΗΙΚΜΝΟΡΤΧΥΖοАВЕКМНОРСТХаеорсух")
    dejavu = FONTS["DejaVuSans.ttf"]
    assert np.array_equal(glyphs.draw("о", dejavu, 32), glyphs.draw("o", dejavu, 32))  # a homoglyph is caught
    for font in glyphs.bundled_fonts():
        bench = {glyphs.draw(c, font, 32).tobytes() for c in glyphs.BENCHMARK_CHARS if glyphs.covers(font, c)}
        drawn = [glyphs.draw(c, font, 32).tobytes() for c in chars if glyphs.covers(font, c)]
        assert not bench & set(drawn), font.name
        assert len(set(drawn)) == len(drawn), font.name  # no two pretraining classes look the same


def test_pretrain_classes_are_drawn_by_several_fonts():
    fonts = glyphs.bundled_fonts()
    assert all(sum(glyphs.covers(f, c) for f in fonts) >= 3 for c in glyphs.pretrain_chars())


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RAYSIM_CACHE", str(tmp_path))
    assert glyphs.cache_dir() == tmp_path
    assert glyphs.cached_path("digits5").parent == tmp_path
    monkeypatch.delenv("RAYSIM_CACHE")
    assert glyphs.cache_dir() == Path("~/.cache/raysim").expanduser()


def test_cache_key_includes_the_renderer(monkeypatch):
    """Another Pillow or FreeType draws other pixels, so its images get their own cache file."""
    plan, _ = glyphs._glyphs62(0, per_writer=1)
    here = plan.digest()
    monkeypatch.setattr(glyphs, "renderer", lambda: ("0.0.0", "2.0.0"))
    assert plan.digest() != here


def test_digits5_under_a_dif_gives_the_fewest_clients_to_the_domain_standing_for_svhn(generated):
    """FedGCR's authors' order (MNIST, USPS, SynthDigits, MNIST-M, SVHN): handwritten, low-res, mono, photo-blend,
    and the coloured serif digits the rarest; ``domain_order=id`` counts by domain id as raysim did before."""
    from raysim.config import build_config, load_preset, preset_for_method
    from raysim.engine.setup import prepare_shards

    preset = preset_for_method(load_preset("offline-digit5-dif10"), "fedvpt")
    counts = {}
    for order in ("paper", "id"):
        shards = prepare_shards(build_config("fedvpt", [preset, {"data": {"domain_order": order}}]))
        counts[order] = dict(zip(shards.info.domain_names, np.bincount(shards.client_domain).tolist()))
    assert counts["paper"] == {"handwritten": 10, "serif": 1, "mono": 3, "photo-blend": 2, "low-res": 6}
    assert counts["id"] == {"handwritten": 10, "serif": 6, "mono": 3, "photo-blend": 2, "low-res": 1}


def test_held_out_clients_leave_each_domain_one_that_trains(generated):
    """On the DIF-10 preset the serif domain (SVHN's stand-in) has one client: holding out 17 of 22 leaves exactly
    one training client per domain, 18 is refused before anything runs."""
    from raysim.base.errors import ConfigError
    from raysim.config import build_config, load_preset, preset_for_method
    from raysim.engine.setup import prepare_shards

    preset = preset_for_method(load_preset("offline-digit5-dif10"), "fedvpt")
    shards = prepare_shards(build_config("fedvpt", [preset, {"federation": {"unseen_fraction": 0.77}}]))
    assert len(shards.unseen) == 17
    assert np.bincount(np.delete(shards.client_domain, shards.unseen), minlength=5).tolist() == [1] * 5
    with pytest.raises(ConfigError, match="hold out at most 17"):
        prepare_shards(build_config("fedvpt", [preset, {"federation": {"unseen_fraction": 0.8}}]))


def test_a_generated_file_its_killed_process_left_half_written_goes_at_the_next_write(owners, tmp_path):
    """The partial file is named by its process and machine: the next write removes one whose process is gone (a
    SIGKILLed generation could not), and leaves one still being written."""
    table = pa.table({"label": [0, 1]})
    killed = tmp_path / f".glyphs62-v1-0.parquet.{owners.gone}"
    running = tmp_path / f".glyphs62-v1-0.parquet.{owners.running}"
    for path in (killed, running):
        path.write_bytes(b"part of a table")
    glyphs._write_atomically(table, tmp_path / "digits-v1-0.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, "digits-v1-0.parquet"])
