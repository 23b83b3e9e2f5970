"""Model references, loading, and cached encoders."""

from editlens.models.resolve import (
    ModelRef,
    is_available,
    load_pretrained,
    model_reference,
    pick_device,
    pick_dtype,
)

__all__ = [
    "ModelRef",
    "is_available",
    "load_pretrained",
    "model_reference",
    "pick_device",
    "pick_dtype",
]
