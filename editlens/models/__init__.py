"""Model references, loading, and cached encoders."""

from editlens.models.resolve import (
    ModelRef,
    is_available,
    load_pretrained,
    model_reference,
)

__all__ = [
    "ModelRef",
    "is_available",
    "load_pretrained",
    "model_reference",
]
