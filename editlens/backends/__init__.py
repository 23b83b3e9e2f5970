"""Vision-language backends shared by DICE, ADIEE and the prompted judges.

One interface (:class:`~editlens.backends.types.Backend`): a batch of chat
requests in, generated texts (and optional token log-probabilities) out.
"""

from typing import Any

from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message, TokenStep

__all__ = ["ChatRequest", "Generation", "GenerationSettings", "Message", "TokenStep", "create_backend"]


def create_backend(ref: str, **kwargs: Any) -> Any:
    from editlens.backends.factory import create_backend as _create

    return _create(ref, **kwargs)
