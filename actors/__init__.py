"""Ray actor classes: the ``Coordinator`` and the ``ClientWorker`` pool (shipped as ``raysim.actors``)."""
