"""Registered evaluators ``adiee`` (the VLM scorer) and ``adiee_fast`` (the
feature scorer), usable from ``score``, ``run`` and meta-evaluation.

Both give a score on 0-10 (higher is better). The checkpoint comes from
``--model adiee=DIR`` (or ``--option adiee.model=DIR``,
``EDITLENS_MODEL_ADIEE``). ADIEE scores are cached per checkpoint weights,
hidden-state choice, question template, image size and the content of the
two images and the instruction, so a rerun costs no model call.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from editlens.core.cache import SqliteCache
from editlens.core.cache import key_of as _key
from editlens.core.types import LoadedEdit, Score
from editlens.errors import InputError, ModelUnavailableError
from editlens.metrics.base import Metric
from editlens.paths import cache_dir

#: how the question of each sample is chosen (see AdieeEvaluator)
QUESTION_CHOICES = ("auto", "per-sample", "first")
#: dtypes the 0-10 score can be computed in from the decoder's outputs (the release: its model's bfloat16)
SCORE_DTYPES = ("bfloat16", "float32")


def question_index(seed: int, source_hash: str, edited_hash: str, instruction: str, n: int) -> int:
    """A question index in ``[0, n)`` drawn from ``seed`` and the sample's
    content (not its position), so a resumed or reordered run asks the same.

    >>> question_index(0, "a", "b", "add a cat", 1)
    0
    """
    import hashlib

    digest = hashlib.sha256(f"{seed}\0{source_hash}\0{edited_hash}\0{instruction}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


def score_cache(path: str | Path | None) -> SqliteCache:
    """ADIEE's score cache: a table of the one cache layer."""
    return SqliteCache(Path(path) if path else cache_dir() / "adiee_scores.sqlite", "scores", value_column="result",
                       what="ADIEE score cache", hint="Or pass --option adiee.cache=none.")


def _checkpoint_ref(model: str | None, models: dict[str, str] | None, role: str) -> Any:
    from editlens.models.resolve import model_reference

    mref = model_reference(model or role, models)
    if mref.local_dir is None:
        raise ModelUnavailableError(f"no {role} checkpoint: pass --model {role}=DIR (a directory written by "
                                    f"`editlens adiee train`/`fast-train` or a released checkpoint); got {mref.ref!r}")
    return mref


class AdieeEvaluator(Metric):
    """The ADIEE VLM scorer.

    Options:
        model: checkpoint directory (either layout); default role ``adiee``.
        hidden: ``auto`` (the checkpoint's default), ``emitting-step`` or ``score-token``.
        questions: a question-template file (one per line, ``$instruction``).
        question_choice: ``auto`` (``per-sample`` with a questions file, else
            ``first``), ``per-sample`` (one of the file's questions per sample,
            as the release draws one at random; chosen from ``question_seed``
            and the sample's content, so reruns and resumes agree) or ``first``.
        question_seed: the seed of the per-sample choice (recorded; default 0).
        score_dtype: the dtype the 0-10 score is computed in from the decoder's
            outputs: ``auto`` (``bfloat16`` for a released-layout checkpoint, as
            the release computes it; ``float32`` for ours), ``bfloat16`` or
            ``float32``. Recorded in every result.
        base: base VLM of a checkpoint that does not name it.
        quantization: ``auto`` (a QLoRA-trained checkpoint's base in 4-bit NF4
            on CUDA with bitsandbytes, else unquantised), ``nf4`` (4-bit, CPU
            too; our layout) or ``none``.
        batch_size, max_new_tokens (8, as released), image_side (512).
        cache: ``True`` (user cache), a path, or ``False``/``"none"``.
        require_token: record a sample as *unscored* (raw answer kept) when
            the model never emits ``[SCORE]`` (default ``True``): the released
            scorer then decodes the last step's state, a number the model
            never gave. ``False`` reproduces the release exactly (the score is
            kept and flagged ``score_token_emitted: false`` in details).
    """

    def __init__(self, model: str | None = None, hidden: str = "auto", questions: str | None = None,
                 base: str | None = None, batch_size: int = 8, max_new_tokens: int = 8, image_side: int = 512,
                 device: str = "auto", dtype: str = "auto", cache: bool | str = True, require_token: bool = True,
                 models: dict[str, str] | None = None, quantization: str = "auto", question_choice: str = "auto",
                 question_seed: int = 0, score_dtype: str = "auto", score_token: str = "last") -> None:
        from editlens.adiee.model import HIDDEN_CHOICES
        from editlens.adiee.prompts import load_prompts
        from editlens.models.quant import normalise_choice

        self.quantization = normalise_choice(quantization, "adiee.quantization")

        if hidden not in ("auto", *HIDDEN_CHOICES):
            raise ValueError(f"adiee: hidden must be auto or one of {HIDDEN_CHOICES}, got {hidden!r}")
        self.mref = _checkpoint_ref(model, models, "adiee")
        self.models = dict(models or {})
        self.hidden_option, self.base = hidden, base
        self.batch_size, self.max_new_tokens, self.image_side = int(batch_size), int(max_new_tokens), int(image_side)
        self.device, self.dtype = device, dtype
        self.prompts = load_prompts({"adiee_questions": questions} if questions else None)
        if question_choice not in QUESTION_CHOICES:
            raise ValueError(f"adiee: question_choice must be one of {QUESTION_CHOICES}, got {question_choice!r}")
        self.question_choice = ("per-sample" if questions else "first") if question_choice == "auto" else question_choice
        self.question_seed = int(question_seed)
        if score_dtype not in ("auto", *SCORE_DTYPES):
            raise ValueError(f"adiee: score_dtype must be auto or one of {SCORE_DTYPES}, got {score_dtype!r}")
        self.score_dtype_option = score_dtype
        from editlens.adiee.model import SCORE_TOKEN_CHOICES

        if score_token not in SCORE_TOKEN_CHOICES:
            raise ValueError(f"adiee: score_token must be one of {SCORE_TOKEN_CHOICES}, got {score_token!r}")
        self.score_token = score_token
        self._cache_opt = cache
        self.require_token = bool(require_token)
        self._cache: SqliteCache | None = None
        self._scorer: Any = None
        self._hidden: str | None = None
        self.calls = 0  # batched model calls (benchmarks read it)

    @property
    def cache(self) -> SqliteCache | None:
        if self._cache is None and self._cache_opt not in (False, "none", None):
            self._cache = score_cache(None if self._cache_opt is True else str(self._cache_opt))
        return self._cache

    @property
    def scorer(self) -> Any:
        if self._scorer is None:
            from editlens.models.loader import load_model

            # the checkpoint decides 4-bit under "auto" (QLoRA adapters on a 4-bit base, on CUDA)
            self._scorer, self.load_report, default = load_model(
                str(self.mref.local_dir), kind="adiee", device=self.device, dtype=self.dtype, models=self.models,
                base=self.base, checkpoint_quantization=self.quantization,
                quantization="nf4" if self._loads_4bit() else "none")
            self._hidden = default
        return self._scorer

    @property
    def hidden(self) -> str:
        if self.hidden_option != "auto":
            return self.hidden_option
        if self._hidden is None:
            from editlens.adiee.checkpoint import read_meta

            meta = read_meta(self.mref.local_dir)
            self._hidden = meta.get("hidden", "emitting-step" if meta.get("format") == "released" else "score-token")
        return self._hidden

    def settings(self) -> dict[str, Any]:
        # computed once: the checkpoint's weight hashes are part of every cache key
        if getattr(self, "_settings", None) is None:
            self._settings = self._compute_settings()
        return dict(self._settings)

    def _compute_settings(self) -> dict[str, Any]:
        from editlens.models.fingerprint import fingerprint

        return {"checkpoint": fingerprint(self.mref).get("weights"), "hidden": self.hidden,
                "question": self.prompts.questions[0], "image_side": self.image_side,
                "max_new_tokens": self.max_new_tokens, "dtype": self._decided_dtype(),
                # which [SCORE] of several: part of the key only when not the release's last
                **({"score_token": self.score_token} if self.score_token != "last" else {}),
                # 4-bit weights give other scores: part of the cache key (absent when unquantised)
                **({"quantization": "nf4"} if self._loads_4bit() else {})}

    def _decided_dtype(self) -> str:
        """The dtype the policy runs the scorer in (not "auto": bf16 and fp32 scores are cached apart)."""
        from editlens.models.precision import decide

        return decide(self.dtype, self.device, "quantized" if self._loads_4bit() else "inference").dtype

    def _loads_4bit(self) -> bool:
        """Whether :func:`load_scorer` will put the base in 4-bit (decided without loading it)."""
        from editlens.adiee.checkpoint import read_meta, trained_in_4bit
        from editlens.models.precision import resolve_device
        from editlens.models.quant import use_4bit

        if self.quantization != "auto":
            return self.quantization == "nf4"
        return trained_in_4bit(read_meta(self.mref.local_dir)) and use_4bit("auto", resolve_device(self.device))[0]

    def release_provenance(self) -> dict[str, Any]:
        """How this scoring differs from the released scorer, for a checkpoint in
        the released layout (``{}`` for checkpoints trained here: no release to
        compare with). Part of every result's details and of the run manifest."""
        if getattr(self, "_release", None) is None:
            from editlens.adiee.checkpoint import read_meta

            if read_meta(self.mref.local_dir).get("format") != "released":
                self._release: dict[str, Any] = {}
            else:
                notes = []
                if self.prompts.sources[0].startswith("editlens/templates"):
                    notes.append("question: editlens' own wording, not the release's (its dataset code's question "
                                 "list) that the checkpoint was trained on; pass it from your own file with "
                                 "--option adiee.questions=FILE")
                if self.question_choice == "first" and len(self.prompts.questions) > 1:
                    notes.append("question: always the file's first line; the release draws one of its questions per "
                                 "sample (--option adiee.question_choice=per-sample)")
                # per-sample: the release's draw, made reproducible (seed recorded in each result): not a difference
                if self.batch_size != 1:
                    notes.append(f"batches of {self.batch_size}, left-padded; the release scores one sample at a time "
                                 "(--option adiee.batch_size=1)")
                if self.score_dtype != "bfloat16":
                    notes.append(f"score computed from the decoder's outputs in {self.score_dtype}; the release "
                                 "computes it in bfloat16 (--option adiee.score_dtype=bfloat16)")
                if self.require_token:
                    notes.append("an answer without [SCORE] is unscored; the release decodes the last step anyway "
                                 "(--option adiee.require_token=false reproduces it)")
                if self.hidden != "emitting-step":
                    notes.append(f"hidden state read at {self.hidden!r}; the release reads the step that emits [SCORE]")
                self._release = {"identical_to_release": not notes, "differences_from_release": notes}
        return dict(self._release)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "checkpoint": str(self.mref.local_dir), **self.settings(),
                "prompts": self.prompts.describe(), **self.release_provenance()}

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        return [*self.score_many([(s.source, s.edited, s.instruction) for s in batch],
                                 [(s.source_hash, s.edited_hash) for s in batch])]

    def score_many(self, items: Sequence[tuple[Any, Any, str]], hashes: Sequence[tuple[str, str]] | None = None
                   ) -> list[Score]:
        """Scores for ``(source, edited, instruction)`` arrays; cached."""
        import torch

        from editlens.adiee.model import prediction_dicts
        from editlens.adiee.prompts import inference_inputs, side_by_side
        from editlens.core.images import image_hash

        hashes = hashes or [(image_hash(a), image_hash(b)) for a, b, _ in items]
        base = self.settings()
        chosen = [self.question_for(h[0], h[1], it[2]) for it, h in zip(items, hashes)]
        # the question is part of the key (with "first" it is the first line, as before)
        keys = [_key({**base, "question": self.prompts.questions[q]}, h[0], h[1], it[2])
                for it, h, q in zip(items, hashes, chosen)]
        found = self.cache.get_many(list(dict.fromkeys(keys))) if self.cache else {}
        todo = list(dict.fromkeys(i for i, k in enumerate(keys) if k not in found))
        first: dict[str, int] = {}
        for i in todo:
            first.setdefault(keys[i], i)
        uniq = list(first.values())
        new: dict[str, dict[str, Any]] = {}
        if uniq:
            scorer = self.scorer
            from editlens.models.quant import floating_dtype

            dtype = floating_dtype(scorer.vlm)
            for s in range(0, len(uniq), self.batch_size):
                chunk = uniq[s : s + self.batch_size]
                imgs = [side_by_side(items[i][0], items[i][1], self.image_side) for i in chunk]
                qs = [self.prompts.question(items[i][2], chosen[i]) for i in chunk]
                try:
                    inputs = inference_inputs(scorer.processor, imgs, qs, scorer.device, dtype)
                    self.calls += 1
                    preds = prediction_dicts(scorer.predict(inputs, hidden=self.hidden,
                                                            max_new_tokens=self.max_new_tokens,
                                                            score_token=self.score_token))
                except (RuntimeError, ValueError, torch.cuda.OutOfMemoryError) as exc:
                    for i in chunk:
                        new[keys[i]] = {"error": f"{type(exc).__name__}: {exc}"}
                    continue
                for i, p in zip(chunk, preds):
                    new[keys[i]] = p
            if self.cache:
                self.cache.put_many({k: v for k, v in new.items() if "error" not in v})
        found.update(new)
        release = self.release_provenance()
        out = []
        for k, q in zip(keys, chosen):
            r = found[k]
            asked = {"question_index": q, "question_choice": self.question_choice,
                     **({"question_seed": self.question_seed} if self.question_choice == "per-sample" else {}),
                     "score_dtype": self.score_dtype}
            if "error" in r:
                out.append(Score(self.name, None, "failed", r["error"]))
            elif self.require_token and not r["score_token_emitted"]:
                out.append(Score(self.name, None, "unscored", "the model did not emit [SCORE]",
                                 {"raw": r["answer"], "cached": k not in new, **asked, **release}))
            else:
                out.append(Score(self.name, self.final_score(r),
                                 details={**r, "cached": k not in new, **asked, **release}))
        return out

    @property
    def score_dtype(self) -> str:
        if self.score_dtype_option != "auto":
            return self.score_dtype_option
        from editlens.adiee.checkpoint import read_meta

        return "bfloat16" if read_meta(self.mref.local_dir).get("format", "released") == "released" else "float32"

    def final_score(self, r: dict[str, Any]) -> float:
        """The 0-10 score in :attr:`score_dtype`, from the decoder's outputs (the
        cached value is float32; bfloat16 recomputes it as the release does)."""
        if self.score_dtype == "float32" or r.get("decoder_output") is None:
            return float(r["score"])
        import torch

        from editlens.adiee.model import decode_scores, head_of

        out = torch.tensor([r["decoder_output"]], dtype=torch.float32)
        return float(decode_scores(out, head_of(out.shape[-1]), torch.bfloat16)[0])

    def question_for(self, source_hash: str, edited_hash: str, instruction: str) -> int:
        """Which question a sample gets: 0 (``first``), or drawn from the seed
        and the sample's content (``per-sample``), the same on every rerun."""
        return question_index(self.question_seed, source_hash, edited_hash, instruction, len(self.prompts.questions)) \
            if self.question_choice == "per-sample" else 0


    def score_tensor(self, edited: Any, sources: Any, instructions: list[str]) -> Any:
        """Scores (0-10) differentiable with respect to ``edited`` and ``sources`` (float tensors
        B x 3 x H x W in [0, 1]): the side-by-side image and the processor's pixel values are made in torch
        (:mod:`editlens.models.torch_pixels`; LLaVA-NeXT and Qwen2(.5)-VL scorers), the answer is generated
        from decoded copies, and the state :meth:`AdieeScorer.predict` reads is recomputed with gradients.
        An answer without ``[SCORE]`` gives ``nan`` when ``require_token`` (as it is unscored). Never cached."""
        import torch

        from editlens.adiee.prompts import inference_inputs, side_by_side
        from editlens.models.quant import floating_dtype
        from editlens.models.torch_pixels import llava_next_pixel_values, qwen_pixel_values

        if sources is None:
            raise InputError("adiee scores an edit against its source: pass sources")
        scorer = self.scorer
        scorer.requires_grad_(False)  # gradients go to the images, never into the scorer
        dtype = floating_dtype(scorer.vlm)
        side = self.image_side
        u8 = lambda t: (t.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")  # noqa: E731
        imgs = [side_by_side(u8(sources[b]), u8(edited[b]), side) for b in range(edited.shape[0])]
        inputs = inference_inputs(scorer.processor, imgs, [self.prompts.question(i) for i in instructions],
                                  scorer.device, dtype)
        ip = scorer.processor.image_processor
        dev = scorer.device
        pairs = [torch.cat([torch.nn.functional.interpolate(x[None].to(dev).float(), size=(side, side), mode="bicubic",
                                                            antialias=True, align_corners=False)[0].clamp(0, 1)
                            for x in (sources[b], edited[b])], dim=-1) for b in range(edited.shape[0])]
        if "image_grid_thw" in inputs:  # Qwen2-VL / Qwen2.5-VL
            import importlib

            smart_resize = importlib.import_module(type(ip).__module__).smart_resize  # the processor's own rule
            lo, hi = ip.size["shortest_edge"], ip.size["longest_edge"]
            factor = int(ip.patch_size) * int(ip.merge_size)
            parts = [qwen_pixel_values(p, ip, smart_resize(side, 2 * side, factor=factor, min_pixels=lo, max_pixels=hi))
                     for p in pairs]
            if [list(g) for _, g in parts] != inputs["image_grid_thw"].tolist():
                raise InputError("adiee: the torch image grid differs from the processor's")
            pixels = torch.cat([p for p, _ in parts])
        elif "image_sizes" in inputs:  # LLaVA-NeXT: tiles, padded to the batch's most
            views = [llava_next_pixel_values(p, ip) for p in pairs]
            most = max(v.shape[0] for v in views)
            pixels = torch.stack([torch.cat([v, v.new_zeros(most - v.shape[0], *v.shape[1:])]) for v in views])
        else:
            raise InputError(f"adiee: no differentiable path for a {scorer.family} scorer (LLaVA-NeXT and "
                             "Qwen2(.5)-VL have one)")
        if tuple(pixels.shape) != tuple(inputs["pixel_values"].shape):
            raise InputError(f"adiee: torch pixel values {tuple(pixels.shape)} differ in shape from the processor's "
                             f"{tuple(inputs['pixel_values'].shape)}")
        scores, emitted = scorer.score_with_grad(inputs, pixels.to(inputs["pixel_values"].dtype), hidden=self.hidden,
                                                 max_new_tokens=self.max_new_tokens, score_token=self.score_token)
        if self.require_token:
            scores = torch.where(torch.tensor(emitted, device=scores.device), scores, torch.full_like(scores, math.nan))
        return scores


class AdieeFastEvaluator(Metric):
    """The fast feature scorer (see :mod:`editlens.adiee.fast`).

    Options: ``model`` (directory from ``editlens adiee fast-train``; role
    ``adiee_fast``), and the CLIP/DINO models through ``--model clip=...``."""

    def __init__(self, model: str | None = None, device: str = "auto", dtype: str = "auto",
                 models: dict[str, str] | None = None) -> None:
        self.mref = _checkpoint_ref(model, models, "adiee_fast")
        self.models, self.device, self.dtype = dict(models or {}), device, dtype
        self._scorer: Any = None

    @property
    def fast(self) -> Any:
        if self._scorer is None:
            from editlens.adiee.fast import FastScorer

            self._scorer = FastScorer.load(self.mref.local_dir, models=self.models, device=self.device, dtype=self.dtype)
        return self._scorer

    def describe(self) -> dict[str, Any]:
        from editlens.models.fingerprint import fingerprint

        return {**super().describe(), "checkpoint": fingerprint(self.mref), "encoders": self.fast.encoder_refs()}

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        values = self.fast.score([s.source for s in batch], [s.edited for s in batch], [s.instruction for s in batch],
                                 [s.source_hash for s in batch], [s.edited_hash for s in batch])
        return [float(v) for v in values]
