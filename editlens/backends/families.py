"""What the code needs beside the model families' data: the box conventions
and the torchvision-free processors. The families themselves (``model_type``
-> model class, box convention, vision tower, fallback processor) are
``vlm-family`` presets, one JSON file each under
``editlens/models/presets/families/`` (see :mod:`editlens.models.registry`).

Box conventions (:data:`BOX_CONVENTIONS`): how a family writes box
coordinates when asked to locate something. ``fraction``: 0-1 of the image
width/height; ``per-mille``: integers 0-1000 (Qwen2-VL's grounding format);
``pixels``: pixel coordinates of the image as the model saw it (Qwen2.5-VL;
its processor rounds each side to a multiple of 28, so boxes carry that
rounding, under 28 px, when read against the original size).
Readers of boxes take the convention from here (or from the user), never
from the size of the numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: convention -> what the prompt says about coordinates
BOX_CONVENTIONS: dict[str, str] = {
    "fraction": "as fractions of the picture width and height between 0 and 1",
    "per-mille": "as thousandths of the picture width and height, whole numbers from 0 to 1000",
    "pixels": "in pixels of the picture",
}
#: the convention used when the model family is unknown (e.g. behind an HTTP server)
DEFAULT_BOX_CONVENTION = "fraction"


def _read_chat_template(path: str) -> str | None:
    from editlens.core.io import read_json
    from editlens.errors import InputError

    folder = Path(path)
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    for name in ("chat_template.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            doc = read_json(folder / name, "the model's chat template")
            if name == "chat_template.json" and not (isinstance(doc, dict) and isinstance(doc.get("chat_template"), str)):
                raise InputError(f"{folder / name}: no 'chat_template' text")
            return doc.get("chat_template") if isinstance(doc, dict) else None
    return None


def qwen2_vl_processor(path: str) -> Any:
    """Qwen2-VL's processor insists on a video processor, which needs
    torchvision; images need only the image processor and the tokenizer."""
    import transformers
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    class ImageOnlyQwen2VLProcessor(transformers.Qwen2VLProcessor):
        attributes = ["image_processor", "tokenizer"]

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kw: Any):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            transformers.ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ip = Qwen2VLImageProcessorPil.from_pretrained(path, local_files_only=True)
    return ImageOnlyQwen2VLProcessor(image_processor=ip, tokenizer=tok, chat_template=_read_chat_template(path))


def qwen3_vl_processor(path: str) -> Any:
    """Qwen3-VL's processor, image-only for the same reason as
    :func:`qwen2_vl_processor` (its video processor needs torchvision)."""
    import transformers
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    class ImageOnlyQwen3VLProcessor(transformers.Qwen3VLProcessor):
        attributes = ["image_processor", "tokenizer"]

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kw: Any):
            transformers.Qwen3VLProcessor.__init__(self, image_processor, tokenizer, None, chat_template=chat_template)

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ip = Qwen2VLImageProcessorPil.from_pretrained(path, local_files_only=True)
    return ImageOnlyQwen3VLProcessor(image_processor=ip, tokenizer=tok, chat_template=_read_chat_template(path))


def family_from_name(name: str | None) -> str | None:
    """The ``model_type`` a served model's name or path points to (engines
    serve ``Qwen/Qwen2.5-VL-7B-Instruct`` under that name, or list it as the
    ``root`` of another name), or ``None`` when it names no known family.

    >>> family_from_name("Qwen/Qwen2.5-VL-7B-Instruct"), family_from_name("/models/qwen2-vl-2b")
    ('qwen2_5_vl', 'qwen2_vl')
    >>> family_from_name("Qwen/Qwen3-VL-8B-Instruct"), family_from_name("my-judge")
    ('qwen3_vl', None)
    """
    import re

    text = re.sub(r"[^a-z0-9]+", "", str(name or "").lower())
    for key, model_type in (("qwen25vl", "qwen2_5_vl"), ("qwen3vl", "qwen3_vl"), ("qwen2vl", "qwen2_vl"),
                            ("idefics3", "idefics3"), ("smolvlm", "smolvlm"), ("llavanext", "llava_next"),
                            ("llavav16", "llava_next")):
        if key in text:
            return model_type
    return None


def box_convention(backend_description: dict[str, Any] | None) -> str:
    """The box convention of the model a backend runs: its ``model_type``
    (local backends), else the family its served name or ``root`` points to
    (engines, see :func:`family_from_name`), else :data:`DEFAULT_BOX_CONVENTION`."""
    from editlens.models.registry import family_for

    d = backend_description or {}
    family = family_for(str(d.get("model_type")))
    if family is None:
        for name in (d.get("model"), *_served_names(d.get("served"))):
            guessed = family_from_name(name)
            if guessed is not None:
                family = family_for(guessed)
                break
    return family.boxes if family else DEFAULT_BOX_CONVENTION


def _served_names(served: Any) -> list[str]:
    """``root``/``parent`` of an engine's model entry (kept by the HTTP backend as JSON text)."""
    if not served:
        return []
    try:
        d = json.loads(served) if isinstance(served, str) else dict(served)
    except (ValueError, TypeError):
        return []
    return [str(d[k]) for k in ("root", "parent") if d.get(k)]
