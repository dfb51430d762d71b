"""Backbones (timm) and the prompt wrapper. Importing this package applies the torchvision shim first.

Imports torch, timm and safetensors, and of raysim's only the ``core`` modules below it (errors, seeding, prompts,
named): no Ray, engine or MLflow (docs/architecture.md, the layers; tests/test_layers.py)."""

from raysim.models._compat import ensure_torchvision

ensure_torchvision()
