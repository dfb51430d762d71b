"""Aids for tests and benchmarks: fault injection (:mod:`.chaos`), tiny settings and an untracked simulation
(:mod:`.smoke`), FedAvg by hand (:mod:`.reference`), a command's own lines (:mod:`.console`).

May import the engine and everything below it; only ``sweep`` and the CLI come later (docs/architecture.md)."""
