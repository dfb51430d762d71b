"""The protocol every method implements, the typed messages, the registries, seeds, errors and the local training
loops a method is written with.

Imports: ops, data (shard types), models (the prompt wrapper's types). Never ray, the engine or tracking.
"""
