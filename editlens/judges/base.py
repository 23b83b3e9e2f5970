"""A judge is a metric whose scores come from a vision-language model."""

from __future__ import annotations

from typing import Any, Sequence

from editlens.backends.types import ChatRequest, Generation
from editlens.core.types import LoadedEdit, Score
from editlens.errors import ModelUnavailableError
from editlens.judges.ensemble import check_sampling, expand, regroup
from editlens.judges.templates import Template, load_template
from editlens.metrics.base import Metric


class VLMJudge(Metric):
    """Options shared by every judge.

    Args:
        vlm: hub id, local directory, or ``http(s)://.../v1`` URL of an
            OpenAI-compatible server.
        vlm_model: model name on the server (default: the first it lists).
        cache: ``True`` (default response cache), a path, or ``False``.
        templates: ``{template name: path}`` overrides.
        max_new_tokens: answer length limit.
        samples: answers asked per question (self-ensembling; needs
            ``temperature`` > 0 when more than 1). The score is the mean over
            the parsed answers; see :mod:`editlens.judges.ensemble`.
        temperature: sampling temperature (0: greedy, one answer).
        seed: seed of the first sampled answer (sample k uses seed + k).
        min_samples: parsed answers a score needs (default: all ``samples``);
            with fewer the sample is *unscored*. A sampled request lost to the
            transport makes the sample *failed* whatever this says.
        engine: URL of an OpenAI-compatible engine for this judge alone
            (``--option viescore.engine=URL``); it replaces ``vlm``.
    """

    template_names: tuple[str, ...] = ()
    #: images one request of this judge carries (checked once against an engine, see editlens.backends.engine)
    images_per_prompt: int = 2

    #: send the engine its start-up capability probe (one request with as many images as a prompt
    #: shows); ``False`` skips it (``bench run --no-probe``: an engine's limits then surface per request)
    probe_engine: bool = True

    def __init__(self, vlm: str | None = None, vlm_model: str | None = None, device: str = "auto",
                 dtype: str = "auto", cache: bool | str = True, templates: dict[str, str] | None = None,
                 max_new_tokens: int = 256, batch_size: int = 8, models: dict[str, str] | None = None,
                 samples: int = 1, temperature: float = 0.0, seed: int = 0, min_samples: int | None = None,
                 engine: str | None = None, http: Any = None) -> None:
        check_sampling(samples, temperature, min_samples)
        vlm = engine or vlm  # --option NAME.engine=URL: this judge on its own engine, whatever --vlm says
        self.samples, self.temperature, self.seed = int(samples), float(temperature), int(seed)
        self.min_samples = None if min_samples is None else int(min_samples)
        if not vlm:
            raise ModelUnavailableError("this judge needs a vision-language model: pass --vlm HUB_ID_OR_DIR_OR_URL "
                                        "(Python: vlm=...)")
        self.vlm, self.vlm_model, self.device, self.dtype = vlm, vlm_model, device, dtype
        self.cache, self.batch_size, self.models = cache, batch_size, models
        self.max_new_tokens = max_new_tokens
        self.templates: dict[str, Template] = {n: load_template(n, templates) for n in self.template_names}
        self.http = http  # how an engine's answers are fetched (backends.factory.HttpSettings; None: built in)
        self._backend: Any = None

    @property
    def backend(self) -> Any:
        if self._backend is None:
            from editlens.backends.engine import EngineNeeds
            from editlens.backends.factory import create_backend

            self._backend = create_backend(self.vlm, device=self.device, dtype=self.dtype, batch_size=self.batch_size,
                                           cache=self.cache, http_model=self.vlm_model, models=self.models,
                                           needs=EngineNeeds(self.images_per_prompt, False, self.max_new_tokens)
                                           if self.probe_engine else None,
                                           who=f"judge {self.name!r}", http=self.http)
        return self._backend

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "backend": self.backend.describe(),
               "templates": {n: {"source": t.source, "sha256": t.sha256} for n, t in self.templates.items()}}
        notes = self.engine_notes()
        if notes:
            out["engine_notes"] = notes
        return out

    def engine_notes(self) -> list[str]:
        """What the engine cannot match for this judge (SGLang ignores seeds unless started with
        --enable-deterministic-inference): said once at the first request, kept in describe()."""
        if getattr(self, "_engine_notes", None) is None:
            from editlens.backends.engine import _raw, engine_honours_seed

            notes = []
            raw = _raw(self.backend)
            if self.temperature > 0 and getattr(raw, "dialect", None) == "sglang" and engine_honours_seed(raw) is not True:
                notes.append(f"judge {self.name!r}: SGLang uses the samples' seeds only when started with "
                             "--enable-deterministic-inference: the sampled answers are not reproducible")
            for note in notes:
                import logging

                logging.getLogger("editlens.judges").warning("%s", note)
            self._engine_notes = notes
        return list(self._engine_notes)

    def provenance(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return {"backend": backend_provenance(self.backend),
                "templates": {n: {"source": t.source, "sha256": t.sha256} for n, t in self.templates.items()}}

    def ask(self, requests: Sequence[ChatRequest]) -> list[list[Generation]]:
        """Every request's answers: ``samples`` of them (each cached on its own)."""
        n = self.samples if self.temperature > 0 else 1
        if n > 1:
            self.engine_notes()
        gens = self.backend.generate(expand(requests, n, self.temperature, self.seed)) if requests else []
        return regroup(gens, n)

    @staticmethod
    def unscored(name: str, reason: str, raw: Any) -> Score:
        return Score(name, None, "unscored", reason, {"raw": raw})

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        raise NotImplementedError
