"""Question/answer templates and model inputs for the ADIEE scorer.

Templates are plain text files, one template per line:
``adiee_questions.txt`` (with ``$instruction``) and ``adiee_answers.txt``
(each line holds ``[SCORE]`` once). Both are ours; replace them with
``--template adiee_questions=PATH`` (and ``adiee_answers=PATH`` for training).
A checkpoint in the released layout was trained on the paper's question
wording (its appendix B): to reproduce its behaviour, write those questions
into a file yourself and pass it with ``--template adiee_questions=FILE``.
At inference the first question line is used; in training one question and
one answer are drawn per sample (seeded).

The two images are each resized to ``side x side`` (512 by default) and put
side by side, source left, edited right, into one ``side x 2*side`` image.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from editlens.adiee.model import SCORE_TOKEN
from editlens.errors import InputError
from editlens.judges.templates import Template, load_template


@dataclass(frozen=True)
class Prompts:
    questions: tuple[str, ...]
    answers: tuple[str, ...]
    sources: tuple[str, str]

    def question(self, instruction: str, index: int = 0) -> str:
        return string.Template(self.questions[index]).safe_substitute(instruction=instruction.strip())

    def describe(self) -> dict[str, Any]:
        return {"questions": self.sources[0], "answers": self.sources[1], "first_question": self.questions[0]}


def _lines(t: Template) -> tuple[str, ...]:
    return tuple(line.strip() for line in t.text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def load_prompts(overrides: Mapping[str, str] | None = None) -> Prompts:
    q = load_template("adiee_questions", overrides)
    a = load_template("adiee_answers", overrides)
    questions, answers = _lines(q), _lines(a)
    if not questions:
        raise InputError(f"{q.source}: no question templates")
    for line in questions:
        if "$instruction" not in line and "${instruction}" not in line:
            raise InputError(f"{q.source}: question template without $instruction: {line!r}")
    if not answers or any(line.count(SCORE_TOKEN) != 1 for line in answers):
        raise InputError(f"{a.source}: every answer template needs {SCORE_TOKEN} exactly once")
    return Prompts(questions, answers, (q.source, a.source))


def side_by_side(source: np.ndarray, edited: np.ndarray, side: int = 512) -> Image.Image:
    """Source (left) and edited (right), each resized to ``side x side``.

    >>> side_by_side(np.zeros((10, 20, 3), np.uint8), np.zeros((5, 5, 3), np.uint8), 8).size
    (16, 8)
    """
    canvas = Image.new("RGB", (2 * side, side))
    for i, arr in enumerate((source, edited)):
        canvas.paste(Image.fromarray(arr).resize((side, side), Image.Resampling.BICUBIC), (i * side, 0))
    return canvas


def chat_prompt(processor: Any, question: str) -> str:
    conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    return processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)


def inference_inputs(processor: Any, images: Sequence[Image.Image], questions: Sequence[str], device: Any,
                     dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """One left-padded batch for generation."""
    processor.tokenizer.padding_side = "left"
    texts = [chat_prompt(processor, q) for q in questions]
    inputs = processor(text=texts, images=list(images), return_tensors="pt", padding=True).to(device)
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
    return dict(inputs)


def training_example(processor: Any, image: Image.Image, question: str, answer: str) -> dict[str, torch.Tensor]:
    """Token ids of prompt + answer + end-of-sequence, with labels on the
    answer (and the end token) only: the prompt is -100."""
    tok = processor.tokenizer
    enc = processor(text=[chat_prompt(processor, question)], images=[image], return_tensors="pt")
    ans = tok(answer, add_special_tokens=False)["input_ids"]
    if tok.eos_token_id is not None:
        ans = ans + [tok.eos_token_id]
    prompt_ids = enc["input_ids"][0]
    ids = torch.cat([prompt_ids, torch.tensor(ans, dtype=prompt_ids.dtype)])
    labels = torch.full_like(ids, -100)
    labels[len(prompt_ids):] = torch.tensor(ans, dtype=ids.dtype)
    ex = {"input_ids": ids, "labels": labels}
    for k, v in enc.items():
        if k in ("input_ids", "attention_mask"):
            continue
        if v.shape[:2] == enc["input_ids"].shape:  # per-token (mm_token_type_ids): answer tokens are text, 0
            ex[k] = torch.cat([v[0], torch.zeros(len(ans), dtype=v.dtype)])
        else:
            ex[k] = v
    return ex


def collate(examples: Sequence[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ids (labels -100, mask 0 on padding); image tensors are
    concatenated along their first axis (one entry per image, or Qwen2-VL's patches)."""
    n = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), n), pad_id, dtype=examples[0]["input_ids"].dtype)
    labels = torch.full((len(examples), n), -100, dtype=ids.dtype)
    mask = torch.zeros((len(examples), n), dtype=torch.long)
    for i, e in enumerate(examples):
        m = len(e["input_ids"])
        ids[i, :m], labels[i, :m], mask[i, :m] = e["input_ids"], e["labels"], 1
    out = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    for k in examples[0]:
        if k in out or k == "scores":
            continue
        if examples[0][k].shape == examples[0]["input_ids"].shape:  # per-token: pad with 0
            t = torch.zeros((len(examples), n), dtype=examples[0][k].dtype)
            for i, e in enumerate(examples):
                t[i, : len(e[k])] = e[k]
            out[k] = t
        else:
            out[k] = torch.cat([e[k] for e in examples])
    if "scores" in examples[0]:
        out["scores"] = torch.stack([e["scores"] for e in examples])
    return out
