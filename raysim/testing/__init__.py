"""Aids for tests and benchmarks: fault injection (:mod:`.chaos`)."""
