"""The engine: the round loop (:mod:`.simulation`), where client work runs (:mod:`.executors`, :mod:`.client`),
round callbacks, Ray sessions and pools, the driver (:mod:`.driver`, whose ``run`` is the entry point), and the
offline backbone's pretraining (:mod:`.pretrain`).

Imports: everything below it (core, ops, systems, data, models, config, tracking, the methods) and
``raysim.actors``.
"""
