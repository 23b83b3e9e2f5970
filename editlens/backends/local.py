"""Local transformers backend: batched multi-image generation with the
model's own chat template and image processor, and token log-probabilities."""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any, Self, Sequence

import torch
from PIL import Image

from editlens.backends import vision_batching
from editlens.backends.types import ChatRequest, Generation, TokenStep, part_pixels
from editlens.errors import ModelUnavailableError
from editlens.models.precision import decide
from editlens.models.resolve import ModelRef, load_pretrained, model_reference


def _model_type(mref: ModelRef) -> str:
    from transformers import AutoConfig

    cfg = load_pretrained(AutoConfig, mref)
    return str(cfg.model_type)


class TransformersBackend:
    """Runs a local (or hub-cached) vision-language model.

    Args:
        model: hub id, local directory, or role name (default role ``vlm``).
        device: ``auto``, ``cpu``, ``cuda``...
        dtype: ``auto`` (bfloat16 where the GPU or CPU computes it natively,
            float32 otherwise; see :mod:`editlens.models.precision`) or an explicit dtype.
        batch_size: requests per ``generate`` call.
    """

    name = "transformers"

    def __init__(self, model: str = "vlm", device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                 models: dict[str, str] | None = None) -> None:
        self.mref = model_reference(model, models)
        if self.mref.role == "vlm" and self.mref.origin == "literal":
            raise ModelUnavailableError("no vision-language model given: pass --vlm HUB_ID_OR_DIR_OR_URL "
                                        "(or set EDITLENS_MODEL_VLM)")
        model_type = _model_type(self.mref)
        from editlens.models.registry import families

        family = families().get(model_type)
        if family is None:
            raise ModelUnavailableError(
                f"model {self.mref.ref!r} is a {model_type!r} model; the local backend runs "
                f"{', '.join(sorted(families()))}. Serve other models with vLLM/SGLang/TGI and pass their URL as --vlm.")
        import transformers

        precision = decide(dtype, device)
        cls = getattr(transformers, family.model_class)
        model_obj = load_pretrained(cls, self.mref, dtype=precision.torch_dtype).to(precision.device).eval()
        try:
            processor = load_pretrained(transformers.AutoProcessor, self.mref)
        except Exception:
            if family.fallback_processor is None:
                raise
            local = self.mref.local_dir or _snapshot(self.mref.ref)
            processor = family.fallback_processor(str(local))
        self._setup(model_obj, processor, model_type, self.mref.ref, getattr(model_obj.config, "_commit_hash", None),
                    precision, batch_size, family.vision_tower)

    @classmethod
    def from_loaded(cls, model: Any, processor: Any, *, model_type: str, model_id: str, revision: str | None,
                    precision: Any, batch_size: int = 8, vision_tower: str | None = None) -> Self:
        """A backend around a model loaded elsewhere (an adapter merged into its
        base, a 4-bit base): same batching, log-probabilities and tower wrapper.
        ``model_id``/``revision`` must name what was loaded (they key the cache)."""
        self = cls.__new__(cls)
        self.mref = ModelRef(None, model_id, "literal")
        self._setup(model, processor, model_type, model_id, revision, precision, batch_size, vision_tower)
        return self

    def _setup(self, model: Any, processor: Any, model_type: str, model_id: str, revision: str | None,
               precision: Any, batch_size: int, vision_tower: str | None) -> None:
        self.precision = precision
        self.device, self.dtype = precision.device, precision.torch_dtype
        self.model = model
        self.processor = processor
        self.tokenizer = self.processor.tokenizer
        self.tokenizer.padding_side = "left"  # decoder-only batching
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model_type = model_type
        self.model_id = model_id
        self.revision = revision
        self.batch_size = batch_size
        self.calls = 0  # generate() calls on the model (tests and benchmarks read it)
        #: extra sampling settings of every generate() call (e.g. {"top_p": 0.9, "top_k": 20}); they are part
        #: of what the model answers, so a subclass that sets them must make them part of ``revision``
        self.sampling: dict[str, Any] = {}
        contiguous_lm_head(self.model)
        # Repeated images in a batch (one source, many edits) are encoded once.
        self.tower_stats = vision_batching.install(self.model, vision_tower, self.device) if vision_tower else None
        self._lock = threading.Lock()
        # the processor's tokenizer is not thread-safe (padding is switched on per call): editlens serve
        # counts prompt tokens in request threads while the model thread encodes and decodes
        self.text_lock = threading.RLock()
        self._cand_ids: dict[tuple, list[int]] = {}

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_id, "revision": self.revision,
                "model_type": self.model_type, "device": self.device, "dtype": str(self.dtype).replace("torch.", "")}

    def provenance(self) -> dict[str, Any]:
        """What the run manifest pins: the hub revision, or the SHA-256 of local weight files."""
        from editlens.models.fingerprint import fingerprint

        return {**self.describe(), "weights": fingerprint(self.mref)}

    # -- prompt building ---------------------------------------------------------
    def _prompt(self, req: ChatRequest) -> tuple[str, list[Image.Image]]:
        conv, images = [], []
        for m in req.messages:
            content = []
            for p in m.parts:
                if isinstance(p, str):
                    content.append({"type": "text", "text": p})
                else:
                    content.append({"type": "image"})
                    images.append(Image.fromarray(part_pixels(p)))
            conv.append({"role": m.role, "content": content})
        text = self.processor.apply_chat_template(conv, add_generation_prompt=req.add_generation_prompt,
                                                  tokenize=False)
        return text, images

    def _candidate_ids(self, cand: str, others: tuple[str, ...] = ()) -> list[int]:
        """Token ids that start ``cand`` with and without a leading space
        (tokenisers differ in whether a word after a space is one token).
        A first token shared with another candidate (a lone space, or ``E``
        of EDIT and of a hypothetical ERASE) cannot tell them apart and is
        left out; a candidate left with no token of its own gets none, so its
        log-probability is reported missing rather than mixed."""
        key = (cand, others)
        if key not in self._cand_ids:
            def first_ids(c: str) -> set[int]:
                # the word as asked, capitalised and lower case, with and without a leading space:
                # "Yes" and "yes" are the answer YES too
                ids = set()
                forms = dict.fromkeys((c, c.capitalize(), c.lower()))
                for variant in [f for w in forms for f in (w, " " + w)]:
                    toks = self.tokenizer.encode(variant, add_special_tokens=False)
                    if toks:
                        ids.add(toks[0])
                return ids

            mine = first_ids(cand)
            for o in others:
                if o != cand:
                    mine -= first_ids(o)
            self._cand_ids[key] = sorted(mine)
        return self._cand_ids[key]

    # -- generation ----------------------------------------------------------------
    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        out: list[Generation | None] = [None] * len(requests)
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[(r.settings, r.candidates)].append(i)
        for idx in groups.values():
            if len(idx) > self.batch_size:
                # prompts of similar length share a batch: every row is padded to the batch's longest prompt,
                # and interleaved prompts (EditScore's SC with two pictures, PQ with one and 40 tokens fewer)
                # spent 14% of each prefill on padding. A call of one batch keeps its order (and its numbers).
                idx = sorted(idx, key=lambda i: prompt_size(requests[i]))
            for k in range(0, len(idx), self.batch_size):
                chunk = idx[k : k + self.batch_size]
                try:
                    gens = self.generate_some([requests[i] for i in chunk])
                except Exception as exc:  # one bad batch must not lose the others
                    gens = [Generation(None, error=f"{type(exc).__name__}: {exc}") for _ in chunk]
                for i, g in zip(chunk, gens):
                    out[i] = g if isinstance(g, Generation) else Generation(None, error="generation was paused")
        return [g for g in out if g is not None]

    def generate_some(self, requests: Sequence[ChatRequest], states: Sequence[Any] | None = None,
                      control: Any = None) -> list[Any]:
        """One batch (same settings and candidates) that may yield between two
        tokens and go on later: see :mod:`editlens.backends.stepping`."""
        from editlens.backends.stepping import generate_some

        return generate_some(self, requests, list(states or [None] * len(requests)), control)

    def count_prompt_tokens(self, req: ChatRequest) -> int:
        """Tokens of the request's prompt as the model sees it (chat template, image tokens)."""
        with self.text_lock:
            text, images = self._prompt(req)
            kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
            if images:
                kwargs["images"] = [images]
            return int(self.processor(**kwargs)["input_ids"].shape[1])

    @property
    def max_token_chars(self) -> int:
        """Characters of the longest vocabulary entry: text longer than
        ``limit x this`` is over ``limit`` tokens without tokenising it."""
        if not hasattr(self, "_max_token_chars"):
            with self.text_lock:
                self._max_token_chars = max((len(t) for t in self.tokenizer.get_vocab()), default=1)
        return self._max_token_chars

    def _steps(self, logits: tuple[torch.Tensor, ...], row: int, ids: list[int], candidates: tuple[str, ...],
               top_k: int, asked: tuple[int, ...] = ()) -> list[TokenStep]:
        steps = []
        for j, tok in enumerate(ids):
            lp = torch.log_softmax(logits[j][row].float(), dim=-1)
            cands = {c: float(torch.logsumexp(lp[self._candidate_ids(c, candidates)], 0))
                     if self._candidate_ids(c, candidates) else None for c in candidates}
            top: list[tuple[str, float | None]] = []
            if top_k:
                vals, inds = lp.topk(top_k)
                top = [(self.tokenizer.decode([int(i)]), float(v)) for v, i in zip(vals, inds)]
            lpv = float(lp[tok])
            vocab = lp.shape[-1]
            asked_lp = {int(t): float(lp[t]) for t in asked if 0 <= int(t) < vocab and math.isfinite(float(lp[t]))}
            steps.append(TokenStep(self.tokenizer.decode([tok]), lpv if math.isfinite(lpv) else None, cands, top,
                                   asked_lp))
        return steps


def prompt_size(req: ChatRequest) -> tuple[int, int]:
    """A cheap stand-in for a request's prompt length (no tokenising): its
    pictures' pixels (image tokens grow with them), then its text's characters.

    >>> import numpy as np
    >>> from editlens.backends.types import Message
    >>> prompt_size(ChatRequest([Message("user", [np.zeros((28, 56, 3), np.uint8), "two words"])]))
    (1568, 9)
    """
    pixels = sum(int(img.shape[0]) * int(img.shape[1]) for img in req.images)
    chars = sum(len(p) for m in req.messages for p in m.parts if isinstance(p, str))
    return pixels, chars


def _contiguous_input(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    x = args[0] if args else None
    if isinstance(x, torch.Tensor) and x.dim() >= 3 and not x.is_contiguous():
        return (x.contiguous(), *args[1:])
    return None


def contiguous_lm_head(model: Any) -> None:
    """Give the output layer contiguous hidden states. ``generate`` hands it
    ``hidden[:, -1:, :]``, a strided slice that ``matmul`` cannot fold into
    one matrix product; it then runs a batched product with the weight
    expanded to the batch, and on CPUs the bf16 kernel copies that
    expansion: B copies of a 150k x H head per prefill (on a 0.8 B Qwen2.5-VL
    in bf16, 8 requests: 2.2 GB copied, two thirds of the batch's time),
    which made batched bf16 generation no faster than fp32. Copying the
    B x H slice instead costs nothing; the products are the same."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if isinstance(head, torch.nn.Module) and not getattr(head, "_editlens_contiguous", False):
        head.register_forward_pre_hook(_contiguous_input)
        head._editlens_contiguous = True  # type: ignore[assignment]  # torch types Module attributes as Tensor | Module


def _snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, local_files_only=True))


def load_backend(ref: ModelRef, precision: Any, quantization: str, models: dict[str, str],
                 batch_size: int = 8) -> TransformersBackend:
    """The ``vlm`` kind's loader (:func:`editlens.models.loader.load_model`)."""
    if quantization == "nf4":
        raise ModelUnavailableError("the local judge backend loads VLMs unquantised; 4-bit is offered by the "
                                    "DICE and ADIEE loaders (--dice-quantization, --quantization)")
    return TransformersBackend(ref.ref, device=precision.device, dtype=precision.dtype, batch_size=batch_size,
                               models=models)
