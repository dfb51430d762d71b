"""Backbones (timm) and the prompt wrapper. Importing this package applies the torchvision shim first."""

from raysim.models._compat import ensure_torchvision

ensure_torchvision()
