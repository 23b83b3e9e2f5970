"""Model references, loading, and cached encoders."""

from editlens.models.resolve import (
    DEFAULT_MODELS,
    ModelRef,
    is_available,
    load_pretrained,
    model_reference,
    pick_device,
    pick_dtype,
)

__all__ = [
    "DEFAULT_MODELS",
    "ModelRef",
    "is_available",
    "load_pretrained",
    "model_reference",
    "pick_device",
    "pick_dtype",
]
