"""Core types and image input/output."""

from editlens.core.images import ImageLoadOptions, load_image
from editlens.core.types import EditSample, LoadedEdit, Score

__all__ = ["EditSample", "LoadedEdit", "Score", "ImageLoadOptions", "load_image"]
