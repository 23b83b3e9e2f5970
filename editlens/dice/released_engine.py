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

from editlens.backends.engine import EngineNeeds, _raw, engine_tokens
from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.backends.wire import ENGINE_TOP_LOGPROBS
from editlens.dice.released_format import RawGeneration
from editlens.errors import InputError

#: served model names of the two stages unless told otherwise (vLLM's --lora-modules NAME=DIR)
DEFAULT_SERVED = {"detector": "dice-detector", "coherence": "dice-coherence"}


class EngineModel:
    """One DICE stage on an engine; :meth:`generate` returns what
    :func:`editlens.dice.released.generate_raw` returns in-process."""

    quantized = False

    def __init__(self, url: str, served_model: str, role: str, max_new_tokens: int, option: str,
                 http: Any = None) -> None:
        from editlens.backends.factory import create_backend

        self.role, self.option = role, option
        self.spec = f"{served_model} at {url}"
        self.notes: list[str] = []
        # no response cache here: the evaluator's results are cached by the run; answers must stay fresh
        self.backend = create_backend(url, cache=False, http_model=served_model,
                                      model_option=f"{option}_{role} (the served name of the {role} adapter)",
                                      needs=EngineNeeds(2, True, max_new_tokens), who=f"DICE {role}",
                                      engine_option=option, http=http)
        self._variants: dict[tuple[str, ...], list[dict[str, tuple[int, str]]]] = {}
        self.dialect = getattr(_raw(self.backend), "dialect", None)
        #: the engine returns log-probabilities after its penalties (SGLang)
        self.after_penalties = self.dialect == "sglang"

    def variants(self, words: Sequence[str]) -> list[dict[str, tuple[int, str]]]:
        key = tuple(words)
        if key not in self._variants:
            self._variants[key] = engine_tokens(self.backend, words)
        return self._variants[key]

    def generate(self, conversation: list[dict[str, Any]], images: Sequence[np.ndarray], gen: Any,
                 candidates: Sequence[str], confidence: str = "logits") -> Any:
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
        be = _raw(self.backend)
        dialect = getattr(be, "dialect", None)
        settings = GenerationSettings(max_new_tokens=gen.max_new_tokens, top_logprobs=ENGINE_TOP_LOGPROBS,
                                      repetition_penalty=gen.repetition_penalty)
        req = ChatRequest(messages, settings, add_generation_prompt=gen.add_generation_prompt,
                          logprob_tokens=tuple(ids))
        (g,) = self.backend.generate([req])
        if g.error:
            raise RuntimeError(g.problem)  # the stage fails (redone on rerun), never "unparsable"
        text = g.text or ""
        steps = g.steps or []
        text_of = {tok: text for v in variants for tok, text in v.values()}
        by_text = {text: tok for tok, text in text_of.items()}
        known_ids = bool(steps) and all(st.token_id is not None for st in steps)
        step_ids, step_logits, exact = [], [], bool(steps)
        for j, step in enumerate(steps):
            tid = step.token_id if known_ids else by_text.get(step.token)
            step_ids.append(tid if tid is not None else -1 - j)  # -1 - j: a token no candidate starts with
            found = {tok: lp for tok, lp in step.ids.items() if tok in text_of}
            exact = exact and len(found) == len(text_of)
            for name, lp in step.top:  # engines without exact ids: the candidates among the top tokens
                tok = by_text.get(name)
                if tok is not None and lp is not None:
                    found.setdefault(tok, float(lp))
            step_logits.append(found)
        source = probability_source(dialect, exact, self.after_penalties)
        plain = [{w: tok for w, (tok, _) in v.items()} for v in variants]
        wanted = set(ids)
        emitted = [k for k, t in enumerate(step_ids) if t in wanted]
        missing = sum(1 for k in emitted if not wanted <= set(step_logits[k]))
        if known_ids:  # offsets from the token ids, as in-process: special tokens and split characters counted right
            offsets: Any = TokenOffsets([int(st.token_id) for st in steps if st.token_id is not None], text,
                                        lambda toks: self._detokenize(toks))
        else:  # an engine that names no token ids: the tokens' texts (wrong after special or split characters)
            offsets, at = [], 0
            for step in steps:
                offsets.append(at)
                at += len(step.token)
            source += "; token offsets from the tokens' texts (the engine returned no token ids)"
        return RawGeneration(text, step_ids, offsets, step_logits, plain,
                             "stop" if g.finish_reason == "stop" else "length", source, len(emitted), missing)

    def _detokenize(self, tokens: list[int]) -> str:
        from editlens.backends.engine import engine_detokenize

        return engine_detokenize(self.backend, tokens)

    def describe(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return {"spec": self.spec, "engine": backend_provenance(self.backend), "quantized_4bit": None,
                "dtype": "the engine's", "precision": None}


def probability_source(dialect: str | None, exact: bool, after_penalties: bool) -> str:
    """What a stage's probabilities are, as recorded per result."""
    if exact:
        what = ("engine ids (exact log-probabilities of the candidate tokens, vLLM logprob_token_ids)"
                if dialect == "vllm" else "engine ids (exact log-probabilities of the candidate tokens)")
    else:
        what = f"engine top-{ENGINE_TOP_LOGPROBS} log-probabilities (a candidate outside them is missing)"
    return what + (", after the engine's penalties" if after_penalties else "")


def engine_notes(dialect: str | None, role: str, gen: Any, deterministic: bool | None = None) -> list[str]:
    """What an engine cannot match of a DICE stage, said at start and recorded with every result."""
    notes = []
    if dialect == "sglang":
        if not gen.add_generation_prompt:
            notes.append(f"DICE {role} on SGLang: SGLang has no add_generation_prompt request field and always adds "
                         "the generation prompt, so the conversation differs from the release's (which renders it "
                         "without); answers can differ")
        if gen.repetition_penalty != 1.0:
            notes.append(f"DICE {role} on SGLang: the repetition penalty {gen.repetition_penalty:g} counts generated "
                         "tokens only (the release's transformers counts the prompt's too); answers can differ")
        notes.append(f"DICE {role} on SGLang: log-probabilities are taken after SGLang's penalties, and only its top "
                     f"{ENGINE_TOP_LOGPROBS} (no exact ids in SGLang's chat API): a candidate outside them leaves "
                     "the confidence unavailable")
    elif dialect == "vllm":
        notes.append(f"DICE {role} on vLLM: candidate log-probabilities asked by id (logprob_token_ids); an older "
                     f"vLLM without that field answers its top {ENGINE_TOP_LOGPROBS} only, and a candidate outside "
                     "them is reported missing")
    elif dialect is None:
        notes.append(f"DICE {role} on an engine editlens does not know: only its top {ENGINE_TOP_LOGPROBS} "
                     "log-probabilities are read; every sampling field is left to it where neutral")
    return notes


class TokenOffsets(Sequence[int]):
    """Where each generated token starts in the answer, from the token ids (as
    in-process: the length of the decoded prefix), computed on demand: the
    engine's ``/detokenize`` is asked for a prefix only when a search reads
    it. A token whose text never appears in the answer (a special token:
    ``/detokenize`` writes it, the answer skips it) counts for nothing."""

    def __init__(self, ids: list[int], text: str, detokenize: Any) -> None:
        self.ids, self.text, self._detok = ids, text, detokenize
        self._alone: dict[int, bool] = {}
        self._at: dict[int, int] = {}

    def _special(self, tok: int) -> bool:
        if tok not in self._alone:
            piece = self._detok([tok])
            self._alone[tok] = bool(piece) and "\ufffd" not in piece and piece not in self.text
        return self._alone[tok]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(len(self)))]
        if j < 0:
            j += len(self)
        if not 0 <= j < len(self.ids):
            raise IndexError(j)
        if j not in self._at:
            kept = [t for t in self.ids[:j] if not self._special(t)]
            self._at[j] = len(self._detok(kept)) if kept else 0
        return self._at[j]
