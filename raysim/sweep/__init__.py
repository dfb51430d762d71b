"""``raysim tune``: Ray Tune search spaces (:mod:`.space`) and sweeps whose trials are whole runs (:mod:`.tune`).

Imports: the engine and everything below it.
"""
