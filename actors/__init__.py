"""Thin ``ray.remote`` wrappers of the engine's plain classes, and the one proxy that waits on an actor (shipped as
``raysim.actors``)."""
