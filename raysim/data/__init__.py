"""Data sources, partitioners and client shards. Importing the package registers every source by name.

Imports: the base of core (errors, the name registry, Ray's start), ops and systems (and the libraries that read
and render data).
"""

from raysim.data.glyphs import GLYPH_SOURCES
from raysim.data.real import REAL_SOURCES
from raysim.data.sources import SOURCES, Source

for _name, (_description, _read) in {**GLYPH_SOURCES, **REAL_SOURCES}.items():
    SOURCES.add(_name, Source(_name, _description, _read))
