"""Image and text encoders (CLIP, DINOv2) with a content-hash embedding cache.

In an editing benchmark one source image is shared by many edits (ImagenHub:
179 sources x 8 methods), and CLIP-I, CLIP-T and CLIP-D all need the edited
image's embedding. Each distinct image or text is encoded once per encoder
and reused from the cache, keyed by a hash of its pixels or its text.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from editlens.core.images import image_hash
from editlens.errors import ModelUnavailableError
from editlens.models.precision import decide
from editlens.models.resolve import ModelRef, load_pretrained


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class EmbeddingCache:
    """Thread-safe map from content hash to a CPU float32 embedding."""

    def __init__(self) -> None:
        self._data: dict[str, torch.Tensor] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_many(self, keys: Sequence[str], compute: Callable[[list[int]], torch.Tensor]) -> torch.Tensor:
        """Embeddings for ``keys``; ``compute(indices)`` encodes the missing ones."""
        with self._lock:
            missing = []
            first: dict[str, int] = {}
            for i, k in enumerate(keys):
                if k not in self._data and k not in first:
                    first[k] = i
                    missing.append(i)
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
        if missing:
            new = compute(missing).detach().to("cpu", torch.float32)
            with self._lock:
                for row, i in enumerate(missing):
                    self._data[keys[i]] = new[row]
        with self._lock:
            return torch.stack([self._data[k] for k in keys])

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._data

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def _features(out: Any) -> torch.Tensor:
    # transformers 5 returns a model output whose pooler_output holds the
    # projected embedding; 4.x returned the tensor itself.
    return out if isinstance(out, torch.Tensor) else out.pooler_output


class _Encoder:
    batch_size = 32

    processor: Any  # set by each encoder's loading

    def __init__(self, mref: ModelRef, device: str, dtype: Any) -> None:
        self.mref = mref
        self.device = device
        self.dtype = dtype
        self.image_cache = EmbeddingCache()
        self.text_cache = EmbeddingCache()
        # Preprocessed pixels waiting for the model, keyed by image hash:
        # loader threads fill it (prefetch_images) while the model is busy.
        self._ready: dict[str, torch.Tensor] = {}
        self._ready_lock = threading.Lock()

    def _batched(self, items: list[Any], fn: Callable[[list[Any]], torch.Tensor]) -> torch.Tensor:
        outs = [fn(items[i : i + self.batch_size]) for i in range(0, len(items), self.batch_size)]
        return torch.cat(outs)

    def encode_images(self, images: Sequence[np.ndarray], hashes: Sequence[str] | None = None) -> torch.Tensor:
        keys = list(hashes) if hashes is not None else [image_hash(a) for a in images]
        return self.image_cache.get_many(
            keys, lambda idx: self._batched([(images[i], keys[i]) for i in idx], self._encode_images)
        )

    def prefetch_images(self, images: Sequence[np.ndarray], hashes: Sequence[str]) -> None:
        """Preprocess the images not embedded yet, ahead of :meth:`encode_images`
        (the runner's loader threads call this while the model works)."""
        with self._ready_lock:
            todo = [(a, h) for a, h in zip(images, hashes) if h not in self._ready]
        todo = [(a, h) for a, h in todo if h not in self.image_cache]
        if not todo:
            return
        pixels = self._preprocess([a for a, _ in todo])
        with self._ready_lock:
            if len(self._ready) > 4096:  # prefetched but never scored: do not grow without bound
                self._ready.clear()
            for (_, h), px in zip(todo, pixels):
                self._ready[h] = px

    def _encode_images(self, items: list[tuple[np.ndarray, str]]) -> torch.Tensor:
        with self._ready_lock:
            ready = [self._ready.pop(h, None) for _, h in items]
        missing = [i for i, px in enumerate(ready) if px is None]
        if missing:
            for i, px in zip(missing, self._preprocess([items[i][0] for i in missing])):
                ready[i] = px
        return self._forward(torch.stack([px for px in ready if px is not None]))

    def _preprocess(self, images: list[np.ndarray]) -> torch.Tensor:
        pixels = self.processor(images=[Image.fromarray(a) for a in images], return_tensors="pt")["pixel_values"]
        return pixels.to(self.dtype)

    def _forward(self, pixels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"role": self.mref.role, "ref": self.mref.ref, "origin": self.mref.origin,
                "device": self.device, "dtype": str(self.dtype).replace("torch.", "")}


class CLIPEncoder(_Encoder):
    """CLIP image and text embeddings (the projection outputs)."""

    def __init__(self, mref: ModelRef, device: str = "auto", dtype: str = "auto") -> None:
        from transformers import AutoTokenizer, CLIPImageProcessorPil, CLIPModel

        prec = decide(dtype, device)
        dev, dt = prec.device, prec.torch_dtype
        super().__init__(mref, dev, dt)
        self.model = load_pretrained(CLIPModel, mref, dtype=dt).to(dev).eval()
        self.processor = load_pretrained(CLIPImageProcessorPil, mref)
        self.tokenizer = load_pretrained(AutoTokenizer, mref)
        self.max_length = int(getattr(self.model.config.text_config, "max_position_embeddings", 77))

    @torch.inference_mode()
    def _forward(self, pixels: torch.Tensor) -> torch.Tensor:
        out = self.model.get_image_features(pixel_values=pixels.to(self.device, self.dtype))
        return _features(out).float()

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        return self.text_cache.get_many(
            [text_hash(t) for t in texts], lambda idx: self._batched([texts[i] for i in idx], self._encode_texts)
        )

    @torch.inference_mode()
    def _encode_texts(self, texts: list[str]) -> torch.Tensor:
        tok = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        out = self.model.get_text_features(input_ids=tok["input_ids"].to(self.device),
                                           attention_mask=tok["attention_mask"].to(self.device))
        return _features(out).float()


class DINOEncoder(_Encoder):
    """DINOv2 image embeddings: the final-layer-normalised CLS token."""

    def __init__(self, mref: ModelRef, device: str = "auto", dtype: str = "auto") -> None:
        from transformers import AutoModel, BitImageProcessorPil

        prec = decide(dtype, device)
        dev, dt = prec.device, prec.torch_dtype
        super().__init__(mref, dev, dt)
        self.model = load_pretrained(AutoModel, mref, dtype=dt).to(dev).eval()
        self.processor = load_pretrained(BitImageProcessorPil, mref)

    @torch.inference_mode()
    def _forward(self, pixels: torch.Tensor) -> torch.Tensor:
        out = self.model(pixel_values=pixels.to(self.device, self.dtype))
        return out.pooler_output.float()


_ENCODERS: dict[str, type[_Encoder]] = {"clip": CLIPEncoder, "dino": DINOEncoder}


def _no_4bit(kind: str, quantization: str) -> None:
    if quantization == "nf4":
        raise ModelUnavailableError(f"{kind} encoders load unquantised (4-bit is for the large VLMs)")


def load_clip(ref: ModelRef, precision: Any, quantization: str, models: dict[str, str], **options: Any) -> "CLIPEncoder":
    """The ``clip`` kind's loader (:func:`editlens.models.loader.load_model`)."""
    _no_4bit("CLIP", quantization)
    return CLIPEncoder(ref, device=precision.device, dtype=precision.dtype)


def load_dino(ref: ModelRef, precision: Any, quantization: str, models: dict[str, str], **options: Any) -> "DINOEncoder":
    """The ``dino`` kind's loader (:func:`editlens.models.loader.load_model`)."""
    _no_4bit("DINOv2", quantization)
    return DINOEncoder(ref, device=precision.device, dtype=precision.dtype)


def get_encoder(kind: str, model: str | None = None, device: str = "auto", dtype: str = "auto",
                overrides: dict[str, str] | None = None) -> Any:
    """The shared encoder of ``kind`` (``clip``, ``dino``) for ``model`` (a
    role, hub id or folder; default: the kind's role): metrics that use the
    same model share its weights and its embedding cache."""
    from editlens.models.loader import load_model

    if kind not in _ENCODERS:
        raise ModelUnavailableError(f"unknown encoder kind {kind!r}; known: {sorted(_ENCODERS)}")
    return load_model(model or kind, kind=kind, dtype=dtype, device=device, models=overrides)
