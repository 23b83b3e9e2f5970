"""The ADIEE scorer: a vision-language model with an added ``[SCORE]`` token
whose last-layer hidden state an MLP decodes into a score.

Heads:

* ``regression`` (1 output): the score on 0-10 directly.
* ``class3`` (3 outputs, classes fail / partial / success):
  ``score = clamp(sum(softmax * [0, 1, 2]), 0, 2) * 5``.

Hidden-state choice at inference (``hidden``):

* ``emitting-step`` – the last layer's state at the generation step that
  *emits* ``[SCORE]`` (the position before it; the last generated step when
  ``[SCORE]`` is never emitted). This is what the released scorer does, and
  the default for checkpoints in the released layout.
* ``score-token`` – the state at the ``[SCORE]`` token itself, as in
  training (teacher forcing puts ``[SCORE]`` in the input). When the model
  does not emit ``[SCORE]``, it is appended after the answer. Default for
  checkpoints trained here.

The two differ by one position: a released checkpoint was trained on one and
is read at the other; both are offered so either can be reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, cast

import torch
from torch import nn

SCORE_TOKEN = "[SCORE]"
HEADS = {"regression": 1, "class3": 3}
HIDDEN_CHOICES = ("emitting-step", "score-token")
#: which [SCORE] token of an answer emitting several is read: the release's ``get_score`` takes the last
SCORE_TOKEN_CHOICES = ("last", "first")
#: score (0-1) of each class of the 3-class head
CLASS_SCORES = (0.0, 0.5, 1.0)


class ScoreDecoder(nn.Sequential):
    """Linear(hidden->256) ReLU Linear(256->16) ReLU Linear(16->out).

    >>> d = ScoreDecoder(32, 3)
    >>> d(torch.zeros(4, 32)).shape
    torch.Size([4, 3])
    """

    def __init__(self, hidden: int, out: int) -> None:
        super().__init__(nn.Linear(hidden, 256), nn.ReLU(), nn.Linear(256, 16), nn.ReLU(), nn.Linear(16, out))

    @property
    def out_features(self) -> int:
        return cast(nn.Linear, self[4]).out_features

    @property
    def dtype(self) -> torch.dtype:
        return cast(nn.Linear, self[0]).weight.dtype


def head_of(out_features: int) -> str:
    for name, n in HEADS.items():
        if n == out_features:
            return name
    raise ValueError(f"a score decoder with {out_features} outputs is neither regression (1) nor class3 (3)")


def decode_scores(out: torch.Tensor, head: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decoder outputs -> scores on 0-10, computed in ``dtype`` (float32 by
    default; the release computes in its model's bfloat16), returned as float32.

    >>> decode_scores(torch.tensor([[7.5]]), "regression").tolist()
    [7.5]
    >>> decode_scores(torch.tensor([[0.0, 0.0, 0.0]]), "class3").tolist()  # uniform -> 1 * 5
    [5.0]
    >>> decode_scores(torch.tensor([[0.1, 0.7, 1.3]]), "class3", torch.bfloat16).tolist()  # bf16 steps
    [6.875]
    """
    if head == "regression":
        return out[..., 0].to(dtype).float()
    if head == "class3":
        probs = out.to(dtype).softmax(-1)
        expected = (probs * torch.tensor([0.0, 1.0, 2.0], device=out.device, dtype=dtype)).sum(-1)
        return (expected.clamp(0.0, 2.0) * 5.0).float()
    raise ValueError(f"unknown head {head!r}; use {sorted(HEADS)}")


def score_targets(scores01: torch.Tensor, head: str) -> torch.Tensor:
    """Training targets from data scores in [0, 1]: 0-10 values for
    regression, class indices for class3 as released: floor(score / 5) on the
    0-10 scale (fail below 5, partial from 5, success at 10). The small epsilon
    keeps 0.5 (stored as 0.49999...) a partial success.

    >>> score_targets(torch.tensor([0.0, 0.3, 0.5, 0.8, 1.0]), "class3").tolist()
    [0, 0, 1, 1, 2]
    """
    if head == "regression":
        return scores01.float() * 10.0
    # as released: class = floor(score / 5) on the 0-10 scale (0-4.99 fail, 5-9.99 partial, 10 success)
    return torch.floor(scores01.float() * 2.0 + 1e-6).long().clamp(0, 2)


def score_loss(out: torch.Tensor, scores01: torch.Tensor, head: str) -> torch.Tensor:
    """L1 on the 0-10 scale (regression) or cross-entropy over the 3 classes."""
    target = score_targets(scores01.to(out.device), head)
    if head == "regression":
        return nn.functional.l1_loss(out[..., 0].float(), target)
    return nn.functional.cross_entropy(out.float(), target)


def constant_score_loss(scores01: Sequence[float], head: str) -> float:
    """The score loss of the best *constant* prediction on these targets: the
    median's L1 (regression) or the class prior's entropy (class3). A model
    beats it only by reading its inputs; with balanced 0/1 targets the L1
    of every constant in [0, 10] is 5, so a regression loss stays there
    until the model discriminates.

    >>> constant_score_loss([0.0, 0.0, 1.0, 1.0], "regression")
    5.0
    >>> round(constant_score_loss([0.0, 1.0], "class3"), 4)  # ln 2
    0.6931
    """
    target = score_targets(torch.as_tensor(list(scores01), dtype=torch.float32), head)
    if head == "regression":
        return float((target - target.median()).abs().mean())  # any value between the middle two is as good
    p = torch.bincount(target, minlength=3).float() / len(target)
    p = p[p > 0]
    return float(-(p * p.log()).sum())


@dataclass
class Prediction:
    """One scored edit: the score (0-10), the generated answer, whether
    ``[SCORE]`` was emitted and which state was decoded."""

    score: float
    answer: str
    emitted: bool
    hidden: str
    raw: list[float] = field(default_factory=list)


class AdieeScorer(nn.Module):
    """``vlm`` + ``score_decoder``; their state-dict prefixes are the released layout's."""

    def __init__(self, vlm: nn.Module, processor: Any, head: str = "regression", family: str = "llava_next") -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown head {head!r}; use {sorted(HEADS)}")
        tok = processor.tokenizer
        sid = tok.convert_tokens_to_ids(SCORE_TOKEN)
        if sid is None or sid == tok.unk_token_id:
            raise ValueError(f"the tokenizer has no {SCORE_TOKEN} token")
        self.vlm: Any = vlm  # a transformers model: its methods and config are dynamic
        self.processor = processor
        self.head = head
        self.family = family
        self.score_token_id = int(sid)
        self.base_ref: str | None = None  # the base model a checkpoint was built on, when known
        self.score_decoder = ScoreDecoder(self.hidden_size, HEADS[head])

    @property
    def hidden_size(self) -> int:
        cfg = self.vlm.config
        text = getattr(cfg, "text_config", None) or cfg
        return int(text.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.score_decoder.parameters()).device

    def decode(self, hidden: torch.Tensor) -> torch.Tensor:
        dec: ScoreDecoder = self.score_decoder
        return dec(hidden.to(dec.dtype))

    # -- training ------------------------------------------------------------------
    def training_losses(self, batch: dict[str, torch.Tensor], score_weight: float = 10.0,
                        ce_weight: float = 1.0) -> dict[str, torch.Tensor]:
        """Loss = score_weight * score loss + ce_weight * token cross-entropy.

        ``batch["labels"]`` is -100 everywhere but the answer tokens, so the
        cross-entropy covers the answer only. The score is decoded from the
        last layer's state at the ``[SCORE]`` position of the input.
        """
        model_inputs = {k: v for k, v in batch.items() if k not in ("labels", "scores")}
        out = self.vlm(**model_inputs, output_hidden_states=True, use_cache=False)
        logits = out.logits[:, :-1].float()
        labels = batch["labels"][:, 1:]
        ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        ids = batch["input_ids"]
        is_score = ids == self.score_token_id
        if not bool(is_score.any(-1).all()):
            raise ValueError(f"every training sequence needs a {SCORE_TOKEN} token in its answer")
        pos = is_score.float().argmax(-1)  # first [SCORE] of each row
        hidden = out.hidden_states[-1][torch.arange(ids.shape[0], device=ids.device), pos]
        sl = score_loss(self.decode(hidden), batch["scores"], self.head)
        return {"loss": score_weight * sl + ce_weight * ce, "score_loss": sl.detach(), "ce_loss": ce.detach()}

    # -- inference -----------------------------------------------------------------
    @torch.inference_mode()
    def predict(self, inputs: dict[str, torch.Tensor], hidden: str = "emitting-step",
                max_new_tokens: int = 8, score_token: str = "last") -> list[Prediction]:
        """Greedy generation on a left-padded batch, then one score per row.
        ``score_token``: which ``[SCORE]`` an answer emitting several is read
        at, ``last`` as the release's ``get_score`` or ``first``."""
        if hidden not in HIDDEN_CHOICES:
            raise ValueError(f"hidden must be one of {HIDDEN_CHOICES}, got {hidden!r}")
        if score_token not in SCORE_TOKEN_CHOICES:
            raise ValueError(f"score_token must be one of {SCORE_TOKEN_CHOICES}, got {score_token!r}")
        tok = self.processor.tokenizer
        gen = self.vlm.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                top_p=None, top_k=None, output_hidden_states=True, return_dict_in_generate=True,
                                pad_token_id=tok.pad_token_id)
        prompt_len = inputs["input_ids"].shape[1]
        new = gen.sequences[:, prompt_len:]
        steps = len(gen.hidden_states)
        eos = _eos_ids(self.vlm, tok)
        states, emitted_flags, answers = [], [], []
        redo: dict[int, list[int]] = {}
        for b in range(new.shape[0]):
            ids = new[b].tolist()
            end = next((j for j, t in enumerate(ids) if t in eos), len(ids))
            hits = [j for j, t in enumerate(ids[:end]) if t == self.score_token_id]
            t_score = (hits[-1] if score_token == "last" else hits[0]) if hits else None
            emitted = t_score is not None
            answers.append(tok.decode(ids[:end], skip_special_tokens=False))
            emitted_flags.append(emitted)
            if hidden == "emitting-step":
                t = t_score if emitted else min(end, steps - 1)
                states.append(gen.hidden_states[t][-1][b, -1])
            elif t_score is not None and t_score + 1 < steps:
                states.append(gen.hidden_states[t_score + 1][-1][b, -1])  # [SCORE] fed back in as input
            else:
                states.append(None)
                upto = ids[: t_score + 1] if t_score is not None else ids[:end] + [self.score_token_id]
                redo[b] = upto
        for b, suffix in redo.items():
            states[b] = self._state_at_end(inputs, b, suffix)
        out = self.decode(torch.stack(states))
        scores = decode_scores(out, self.head)
        return [Prediction(float(s), a, e, hidden, [float(x) for x in o])
                for s, a, e, o in zip(scores.tolist(), answers, emitted_flags, out.float().tolist())]

    def score_with_grad(self, inputs: dict[str, torch.Tensor], pixel_values: torch.Tensor,
                        hidden: str = "emitting-step", max_new_tokens: int = 8,
                        score_token: str = "last") -> tuple[torch.Tensor, list[bool]]:
        """Scores differentiable with respect to ``pixel_values`` (shaped as ``inputs["pixel_values"]``):
        the answer is generated greedily without gradients, as :meth:`predict` does; then each row's prompt
        plus the answer up to the state :meth:`predict` reads is run once more, with ``pixel_values``.
        Returns (scores on 0-10, whether each answer emitted ``[SCORE]``)."""
        if hidden not in HIDDEN_CHOICES:
            raise ValueError(f"hidden must be one of {HIDDEN_CHOICES}, got {hidden!r}")
        tok = self.processor.tokenizer
        with torch.no_grad():
            gen = self.vlm.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                    top_p=None, top_k=None, return_dict_in_generate=True,
                                    pad_token_id=tok.pad_token_id)
        new = gen.sequences[:, inputs["input_ids"].shape[1]:]
        steps = new.shape[1]
        eos = _eos_ids(self.vlm, tok)
        with_pixels = {**inputs, "pixel_values": pixel_values}
        states, emitted_flags = [], []
        for b in range(new.shape[0]):
            ids = new[b].tolist()
            end = next((j for j, t in enumerate(ids) if t in eos), len(ids))
            hits = [j for j, t in enumerate(ids[:end]) if t == self.score_token_id]
            t_score = (hits[-1] if score_token == "last" else hits[0]) if hits else None
            emitted_flags.append(t_score is not None)
            if hidden == "emitting-step":  # the state whose next token is [SCORE] (else the end of the answer)
                suffix = ids[: t_score if t_score is not None else min(end, steps - 1)]
            else:  # the state of [SCORE] fed back in
                suffix = ids[: t_score + 1] if t_score is not None else ids[:end] + [self.score_token_id]
            states.append(self._state_at_end(with_pixels, b, suffix))
        return decode_scores(self.decode(torch.stack(states)), self.head), emitted_flags

    def _state_at_end(self, inputs: dict[str, torch.Tensor], b: int, suffix: list[int]) -> torch.Tensor:
        """Last-layer state of the final token of prompt(b) + suffix, with no padding."""
        row = row_inputs(inputs, b)
        extra = torch.tensor([suffix], device=row["input_ids"].device, dtype=row["input_ids"].dtype)
        for k in list(row):  # extend per-token tensors: ids by the suffix, others (type ids) by text zeros
            if row[k].shape[:2] == (1, row["input_ids"].shape[1]) and k not in ("input_ids", "attention_mask"):
                row[k] = torch.cat([row[k], torch.zeros_like(extra, dtype=row[k].dtype)], 1)
        row["input_ids"] = torch.cat([row["input_ids"], extra], 1)
        row["attention_mask"] = torch.ones_like(row["input_ids"])
        out = self.vlm(**row, output_hidden_states=True, use_cache=False)
        return out.hidden_states[-1][0, -1]


def _eos_ids(vlm: nn.Module, tok: Any) -> set[int]:
    ids = getattr(getattr(vlm, "generation_config", None), "eos_token_id", None)
    ids = ids if isinstance(ids, (list, tuple)) else [ids]
    return {int(i) for i in ids if i is not None} | {int(tok.pad_token_id)} | (
        {int(tok.eos_token_id)} if tok.eos_token_id is not None else set())


def row_inputs(inputs: dict[str, torch.Tensor], b: int) -> dict[str, torch.Tensor]:
    """Row ``b`` of a processed batch with its left padding removed. Pixel
    tensors are split per image: LLaVA-NeXT stacks one entry per image,
    Qwen2-VL concatenates patches (``image_grid_thw`` gives each image's count)."""
    mask = inputs["attention_mask"][b].bool()
    shape = inputs["input_ids"].shape
    # per-token tensors (ids, mask, Qwen2-VL's mm_token_type_ids) lose the padding
    row = {k: v[b][mask][None] for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.shape[:2] == shape}
    if "image_grid_thw" in inputs:
        counts = inputs["image_grid_thw"].prod(-1).tolist()
        start = sum(counts[:b])
        row["pixel_values"] = inputs["pixel_values"][start : start + counts[b]]
        row["image_grid_thw"] = inputs["image_grid_thw"][b : b + 1]
    elif "pixel_values" in inputs:
        row["pixel_values"] = inputs["pixel_values"][b : b + 1]
        if "image_sizes" in inputs:
            row["image_sizes"] = inputs["image_sizes"][b : b + 1]
    return row


def add_score_token(vlm: Any, processor: Any) -> int:
    """Add ``[SCORE]`` to the tokenizer (a special token, never split) and
    grow the embeddings and LM head to match; returns its id."""
    tok = processor.tokenizer
    tok.add_tokens([SCORE_TOKEN], special_tokens=True)
    if vlm.get_input_embeddings().weight.shape[0] < len(tok):
        vlm.resize_token_embeddings(len(tok), mean_resizing=False)
    return int(tok.convert_tokens_to_ids(SCORE_TOKEN))


def prediction_dicts(preds: Sequence[Prediction]) -> list[dict[str, Any]]:
    return [{"score": p.score, "answer": p.answer, "score_token_emitted": p.emitted, "hidden": p.hidden,
             "decoder_output": p.raw} for p in preds]
