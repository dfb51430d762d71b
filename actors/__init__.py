"""Thin ``ray.remote`` wrappers of the engine's plain classes, and the one proxy that waits on an actor (shipped as
``raysim.actors``). Imports Ray and the engine; the engine imports these where it starts actors."""
