"""Compatibility shim for a CUDA build of torchvision on a CPU build of torch.

On Linux, PyPI serves torchvision only as a CUDA build. Installed next to the CPU build of torch, its C
extension cannot load, and ``import torchvision`` then fails in ``torchvision/_meta_registrations.py``,
which registers fake kernels for ``torchvision::nms`` and ``torchvision::qnms`` unconditionally.
timm imports torchvision (for its data transforms), so timm fails with it.

:func:`ensure_torchvision` first imports torchvision as it is. Only if that fails with exactly this error
does it declare the two operator schemas (schema only, no kernel) and import again. Everything timm uses
from torchvision is pure Python; calling ``torchvision.ops.nms`` still raises, as it should.
Each process applies it on its own, so Ray workers are covered as soon as they import
:mod:`raysim.models`.
"""

from __future__ import annotations

import sys

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_shim_library = None  # keeps the schema registrations alive for the life of the process


def shim_applied() -> bool:
    """True when this process needed the shim to import torchvision."""
    return _shim_library is not None


def ensure_torchvision() -> None:
    """Import torchvision, declaring its missing operator schemas only when the import needs them."""
    global _shim_library
    if "torchvision" in sys.modules:
        return
    try:
        import torchvision

        return
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
    # a snapshot (copied in one C call): another thread may import meanwhile (the set-up thread builds the model
    # while Ray starts on the main one)
    for name in [m for m in list(sys.modules) if m == "torchvision" or m.startswith("torchvision.")]:
        sys.modules.pop(name, None)
    import torch

    _shim_library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS.values():
        _shim_library.define(schema)
    import torchvision  # noqa: F401
