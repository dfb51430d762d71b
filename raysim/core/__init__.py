"""The protocol every method implements, the typed messages, the methods' registry and the local training loops a
method is written with.

Imports: :mod:`raysim.base`, ops, data (shard types), models (the prompt wrapper's type, for annotations only: the
coordinator looks methods up without timm). Never ray, the engine or tracking.
"""
