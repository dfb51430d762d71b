"""The protocol every method implements, the typed messages, the registries, the declaration of settings (config keys
and method options), seeds, errors, numeric precision and the local training loops a method is written with.

Imports: its base modules (errors, seeding, prompts, preprocess, named, precision, ray_start, settings) nothing of
raysim's but each other, so every layer may use them; the rest ops, data (shard types), models (the prompt wrapper's
type, for annotations only: the coordinator looks methods up without timm). Never ray, the engine or tracking.
"""
