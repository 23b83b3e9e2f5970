"""Released-style DICE models (detector, coherence estimator) served by an
inference engine (vLLM, SGLang, ``editlens serve``) instead of loaded here.

The engine serves the base with each adapter as a model name (vLLM:
``--lora-modules dice-detector=DIR dice-coherence=DIR``). Everything else is
what :class:`~editlens.dice.released.ReleasedDice` does in-process: the same
conversations (images as content parts in the same places, the coherence
turn without the generation prompt), greedy decoding with the same
repetition penalty and token limit, the same answer parsers, and the same
formulas: a difference's confidence is the softmax over ADD/EDIT/REMOVE at
the step that emitted its command, P(YES) the softmax over YES/NO at the
decision's step. Their first tokens come from the engine's ``/tokenize``;
their log-probabilities from the engine's ``top_logprobs`` (an editlens
server answers the exact ids asked for). A softmax over log-probabilities
equals one over logits, so the confidences are those in-process computes
from raw logits (engines report log-probabilities before the repetition
penalty, as the ``logits`` confidence source reads them).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.backends.engine import EngineNeeds, engine_tokens
from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.errors import InputError

#: served model names of the two stages unless told otherwise (vLLM's --lora-modules NAME=DIR)
DEFAULT_SERVED = {"detector": "dice-detector", "coherence": "dice-coherence"}


class EngineModel:
    """One DICE stage on an engine; :meth:`generate` returns what
    :func:`editlens.dice.released.generate_raw` returns in-process."""

    quantized = False

    def __init__(self, url: str, served_model: str, role: str, max_new_tokens: int, option: str) -> None:
        from editlens.backends.factory import create_backend

        self.role, self.option = role, option
        self.spec = f"{served_model} at {url}"
        self.notes: list[str] = []
        # no response cache here: the evaluator's results are cached by the run; answers must stay fresh
        self.backend = create_backend(url, cache=False, http_model=served_model,
                                      model_option=f"{option}_{role} (the served name of the {role} adapter)",
                                      needs=EngineNeeds(2, True, max_new_tokens), who=f"DICE {role}",
                                      engine_option=option)
        self._variants: dict[tuple[str, ...], list[dict[str, tuple[int, str]]]] = {}

    def variants(self, words: Sequence[str]) -> list[dict[str, tuple[int, str]]]:
        key = tuple(words)
        if key not in self._variants:
            self._variants[key] = engine_tokens(self.backend, words)
        return self._variants[key]

    def generate(self, conversation: list[dict[str, Any]], images: Sequence[np.ndarray], gen: Any,
                 candidates: Sequence[str], confidence: str = "logits") -> Any:
        from editlens.dice.released import RawGeneration

        # constant-one (the release's output) needs no probability; softmax-logits reads the engine's logprobs
        if confidence not in ("logits", "softmax-logits", "constant-one"):
            raise InputError("DICE on an engine reads confidences from the engine's log-probabilities, which come "
                             "before the repetition penalty: use --dice-confidence softmax-logits (or constant-one, "
                             "the release's output), or run DICE in-process for the penalised scores")
        messages, pending = [], list(images)
        for turn in conversation:
            parts: list[Any] = []
            for item in turn["content"]:
                if item.get("type") == "image":
                    parts.append(np.ascontiguousarray(pending.pop(0)))
                else:
                    parts.append(item["text"])
            messages.append(Message(turn["role"], parts))
        variants = self.variants(candidates)
        ids = sorted({tok for v in variants for tok, _ in v.values()})
        settings = GenerationSettings(max_new_tokens=gen.max_new_tokens, top_logprobs=20,
                                      repetition_penalty=gen.repetition_penalty)
        req = ChatRequest(messages, settings, add_generation_prompt=gen.add_generation_prompt,
                          logprob_tokens=tuple(ids))
        (g,) = self.backend.generate([req])
        if g.error:
            raise RuntimeError(g.problem)  # the stage fails (redone on rerun), never "unparsable"
        text_of = {tok: text for v in variants for tok, text in v.values()}
        by_text = {text: tok for tok, text in text_of.items()}
        offsets, step_ids, step_logits, at = [], [], [], 0
        for j, step in enumerate(g.steps or []):
            offsets.append(at)
            at += len(step.token)
            step_ids.append(by_text.get(step.token, -1 - j))  # a token no candidate starts with
            found = {tok: lp for tok, lp in step.ids.items() if tok in text_of}
            for text, lp in step.top:  # engines without exact ids: the candidates among the top tokens
                tok = by_text.get(text)
                if tok is not None and lp is not None:
                    found.setdefault(tok, float(lp))
            step_logits.append(found)
        plain = [{w: tok for w, (tok, _) in v.items()} for v in variants]
        return RawGeneration(g.text or "", step_ids, offsets, step_logits, plain,
                             "stop" if g.finish_reason == "stop" else "length")

    def describe(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return {"spec": self.spec, "engine": backend_provenance(self.backend), "quantized_4bit": None,
                "dtype": "the engine's", "precision": None}
