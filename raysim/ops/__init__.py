"""Pure math, as functions of tensors and arrays, each tested on tiny hand-computed values: aggregation, group
selection, contrastive terms, loss reweighting, SPSA, evaluation metrics.

Imports: torch, numpy, ``raysim.base.errors``. Never ray, the engine, models or data.
"""
