"""The engine: the round loop (:mod:`.simulation`), where client work runs (:mod:`.executors`, :mod:`.client`),
precision, round callbacks, Ray sessions and pools, and the driver (:mod:`.driver`, whose ``run`` is the entry point).

Imports: everything below it (core, ops, data, models, config, tracking) and ``raysim.actors``.
"""
