"""Requests and answers exchanged with vision-language backends."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Sequence, Union

import numpy as np

from editlens.core.images import image_hash

#: How :attr:`Generation.problem` starts when the backend failed (transport
#: error, 5xx after retries, a model crash) rather than the model answering.
#: Scores with such a reason are *failed* (retried on rerun), not *unscored*.
BACKEND_ERROR = "backend error: "


def is_backend_failure(reason: str | None) -> bool:
    """Whether a score's reason says the backend failed (not the model's answer).

    >>> is_backend_failure("backend error: HTTP 503"), is_backend_failure("empty answer")
    (True, False)
    """
    return bool(reason) and str(reason).startswith(BACKEND_ERROR)


@dataclass(frozen=True, eq=False)
class EncodedImage:
    """An image part sent as given bytes (as a benchmark's release encodes it: a file's own bytes, a
    JPEG of a given quality) rather than re-encoded by the backend: ``data`` with the MIME type the data
    URL names, the OpenAI ``detail`` field when the release sets one, and ``pixels``, the RGB array the
    bytes decode to (what an in-process model is given)."""

    data: bytes
    mime: str
    pixels: np.ndarray
    detail: str | None = None

    def cache_key(self) -> dict[str, Any]:
        return {"image": image_hash(self.pixels), "sent": hashlib.sha256(self.data).hexdigest(), "mime": self.mime,
                **({"detail": self.detail} if self.detail else {})}


#: A message part: text, an RGB uint8 image array, or an image sent as given bytes.
Part = Union[str, np.ndarray, EncodedImage]


def part_pixels(p: Any) -> np.ndarray:
    """The RGB array of an image part (an array, or what an :class:`EncodedImage`'s bytes decode to)."""
    return p.pixels if isinstance(p, EncodedImage) else p


@dataclass
class Message:
    role: str  # "system", "user" or "assistant"
    parts: list[Part]

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant"):
            raise ValueError(f"message role must be system, user or assistant, got {self.role!r}")
        for p in self.parts:
            if not isinstance(p, (str, np.ndarray, EncodedImage)):
                raise TypeError(f"message parts are text, RGB arrays or encoded images, got {type(p).__name__}")

    @property
    def images(self) -> list[np.ndarray]:
        return [part_pixels(p) for p in self.parts if not isinstance(p, str)]


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy and deterministic by default; sampling when ``temperature > 0``."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    n: int = 1
    seed: int | None = None
    top_logprobs: int = 0  # also return the k most likely tokens at each step
    #: sampling and decoding knobs engines take as request fields (vLLM/SGLang: ``top_k``, ``top_p``,
    #: ``repetition_penalty``); at their defaults they are left out of requests and cache keys
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.n < 1:
            raise ValueError("n must be at least 1")
        if self.n > 1 and self.temperature <= 0:
            raise ValueError("n > 1 samples need temperature > 0 (greedy decoding gives one answer)")


@dataclass
class ChatRequest:
    """A conversation to continue.

    ``candidates``: strings whose log-probability the caller wants at every
    generated step (e.g. ``("ADD", "REMOVE", "EDIT")`` or ``("YES", "NO")``).
    """

    messages: list[Message]
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    candidates: tuple[str, ...] = ()
    #: ``False``: the conversation is rendered without the assistant turn's opening (DICE's coherence
    #: estimator was trained so); vLLM and SGLang take the same request field
    add_generation_prompt: bool = True
    #: token ids whose log-probability the caller wants at every step (editlens servers answer them exactly;
    #: other engines only through ``top_logprobs``)
    logprob_tokens: tuple[int, ...] = ()

    @property
    def images(self) -> list[np.ndarray]:
        return [img for m in self.messages for img in m.images]

    def cache_payload(self) -> dict[str, Any]:
        """The request with images replaced by content hashes (for cache keys)."""
        out: dict[str, Any] = {
            "messages": [{"role": m.role, "parts": [p if isinstance(p, str) else p.cache_key() if isinstance(p, EncodedImage)
                                                 else {"image": image_hash(p)} for p in m.parts]}
                         for m in self.messages],
            "settings": settings_payload(self.settings),
            "candidates": list(self.candidates),
        }
        if not self.add_generation_prompt:
            out["add_generation_prompt"] = False
        if self.logprob_tokens:
            out["logprob_tokens"] = list(self.logprob_tokens)
        return out


#: settings added after cache keys existed: at these values they are left out of keys (old rows stay valid)
_LATER_SETTINGS = {"top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0}


def settings_payload(settings: GenerationSettings) -> dict[str, Any]:
    """The settings as a dict, the later knobs only where they differ from their defaults."""
    d = asdict(settings)
    return {k: v for k, v in d.items() if not (k in _LATER_SETTINGS and v == _LATER_SETTINGS[k])}


@dataclass
class TokenStep:
    """One generated token: its text, log-probability, the log-probabilities
    of the requested candidates (``None`` = not available), and the top-k."""

    token: str
    logprob: float | None
    candidates: dict[str, float | None] = field(default_factory=dict)
    top: list[tuple[str, float | None]] = field(default_factory=list)
    #: token id -> log-probability of the ids a request asked for (:attr:`ChatRequest.logprob_tokens`)
    ids: dict[int, float] = field(default_factory=dict)


@dataclass
class Generation:
    """One answer. ``text`` is ``None`` when there is no answer; ``error``
    (transport/model failure) or ``refusal`` then says why."""

    text: str | None
    steps: list[TokenStep] | None = None
    finish_reason: str | None = None
    refusal: str | None = None
    error: str | None = None
    cached: bool = False
    samples: list[str] = field(default_factory=list)  # all n answers when n > 1
    #: token counts (``prompt_tokens``, ``completion_tokens``) where the backend knows them;
    #: transport information, not part of the answer (never cached)
    usage: dict[str, int] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.refusal is None and bool(self.text and self.text.strip())

    @property
    def problem(self) -> str | None:
        if self.error:
            return f"{BACKEND_ERROR}{self.error}"
        if self.refusal:
            return f"model refused: {self.refusal}"
        if not (self.text and self.text.strip()):
            return "empty answer"
        return None

    @property
    def truncated(self) -> bool:
        """The answer was cut off at the token limit (``finish_reason == "length"``):
        whatever it lists may be incomplete."""
        return self.finish_reason == "length"

    def candidate_distribution(self, step: int) -> dict[str, float] | None:
        """Normalised probabilities of the candidates at ``step``, or ``None``
        when any candidate's log-probability is unavailable there."""
        if self.steps is None or step >= len(self.steps):
            return None
        lp = self.steps[step].candidates
        if not lp or any(v is None or math.isnan(v) or v > 1e-6 for v in lp.values()):
            return None  # missing, NaN or impossible (> 0): no distribution, never a made-up one
        m = max(v for v in lp.values() if v is not None)
        if m == -math.inf:
            return None
        ex = {k: math.exp(v - m) for k, v in lp.items() if v is not None}
        z = sum(ex.values())
        return {k: v / z for k, v in ex.items()}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("cached")
        d.pop("usage")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Generation:
        steps = d.get("steps")
        return cls(
            text=d.get("text"),
            steps=None if steps is None else [TokenStep(s["token"], s["logprob"], dict(s.get("candidates") or {}),
                                                        [tuple(t) for t in s.get("top") or []],
                                                        {int(k): v for k, v in (s.get("ids") or {}).items()})
                                              for s in steps],
            finish_reason=d.get("finish_reason"), refusal=d.get("refusal"), error=d.get("error"),
            samples=list(d.get("samples") or []),
        )


class Backend(Protocol):
    """What every backend offers."""

    name: str  # "transformers", "openai-http", ...
    model_id: str
    revision: str | None

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]: ...

    def describe(self) -> dict[str, Any]: ...


def backend_provenance(backend: Any) -> dict[str, Any]:
    """What a run manifest pins of a backend: its ``provenance()`` when it has
    one (served model and ``/v1/models`` answer, weight hashes), else ``describe()``."""
    fn = getattr(backend, "provenance", None)
    return fn() if callable(fn) else (backend.describe() if hasattr(backend, "describe") else {"backend": str(backend)})


def request_key(backend: Backend, request: ChatRequest) -> str:
    """Cache key: backend, model id and revision, device and dtype (local
    models: bf16 on GPU answers differently from fp32 on CPU), exact prompt,
    image hashes, settings."""
    described = backend.describe() if hasattr(backend, "describe") else {}
    numerics = {k: str(described[k]) for k in ("device", "dtype") if described.get(k) is not None}
    blob = json.dumps({"backend": backend.name, "model": backend.model_id, "revision": backend.revision,
                       **numerics, **request.cache_payload()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
