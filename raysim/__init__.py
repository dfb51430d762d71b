"""raysim: a Ray-native simulator for heterogeneous federated learning with pretrained ViTs."""

__version__ = "0.1.0"
