"""Data sources, partitioners and client shards. Importing the package registers every source by name.

Imports: the base of core (errors, the name registry, Ray's start), ops and systems (and the libraries that read
and render data).
"""

from raysim.data import glyphs
from raysim.data.glyphs import GLYPH_SOURCES
from raysim.data.parquet import PARQUET_LAYOUT, read_parquet
from raysim.data.real import FOLDER_DATASETS, REAL_SOURCES
from raysim.data.sources import SOURCES, Source

# the data sets whose domains have a paper order under an imbalance factor (DatasetInfo.imbalance_order)
IMBALANCE_ORDERED = glyphs.IMBALANCE_ORDERED | {spec.name for spec in FOLDER_DATASETS if spec.imbalance_order}

for _name, (_description, _read) in {**GLYPH_SOURCES, **REAL_SOURCES}.items():
    SOURCES.add(_name, Source(_name, _description, _read))
SOURCES.add("parquet", Source("parquet", f"your own data: {PARQUET_LAYOUT} (data.data_dir)", read_parquet))
FROM_DISK = frozenset({*REAL_SOURCES, "parquet"})  # the data sets read from data.data_dir; the others are built in
