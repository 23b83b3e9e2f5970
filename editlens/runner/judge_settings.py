"""The judge block of a command (``--vlm``, ``--vlm-model``, ``--cache``, ``--template``, ``--samples``,
``--min-samples``, ``--temperature``, ``--timeout``, ``--max-retries``, ``--concurrency``, ``--device``,
``--dtype``) as one value, passed down to the evaluators and from them to the backend factory.

How an engine's answers are fetched (:class:`~editlens.backends.factory.HttpSettings`) travels here, never
as a process-wide default: two runs in one process with different ``--timeout`` do not touch each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from editlens.backends.factory import HttpSettings


def fetch_options(http: HttpSettings | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``http`` as the option an evaluator is given: its fields, or ``None`` with the built-in values (so
    the settings, and the manifests, of runs that did not change them stay as they were).

    >>> fetch_options(HttpSettings()) is None, fetch_options(HttpSettings(concurrency=2))["concurrency"]
    (True, 2)
    """
    if http is None:
        return None
    fetch = http if isinstance(http, HttpSettings) else HttpSettings(**http)
    return None if fetch == HttpSettings() else asdict(fetch)


@dataclass(frozen=True)
class JudgeSettings:
    """What the judges (and DICE's or EditScore's engines) of one command use.

    >>> JudgeSettings().vlm_options() is None
    True
    >>> JudgeSettings("http://127.0.0.1:8000/v1", cache="none").vlm_options()["cache"]
    False
    >>> JudgeSettings("m", http=HttpSettings(timeout=5)).vlm_options()["http"]
    {'timeout': 5.0, 'max_retries': 5, 'concurrency': 8}
    """

    vlm: str | None = None
    vlm_model: str | None = None
    #: response cache: ``default`` (the user cache), ``none``, a file path, or True/False
    cache: str | bool = "default"
    templates: Mapping[str, str] = field(default_factory=dict)
    samples: int = 1
    temperature: float = 0.0
    min_samples: int | None = None
    device: str = "auto"
    dtype: str = "auto"
    http: HttpSettings = field(default_factory=HttpSettings)

    def check(self) -> JudgeSettings:
        """Refuse bad sampling settings and unknown or unreadable templates before any model loads."""
        from editlens.judges.ensemble import check_sampling
        from editlens.runner.checks import check_templates

        check_sampling(self.samples, self.temperature, self.min_samples)
        check_templates(dict(self.templates))
        return self

    def http_options(self) -> dict[str, Any] | None:
        """The ``http`` option an evaluator is given (:func:`fetch_options`)."""
        return fetch_options(self.http)

    def vlm_options(self) -> dict[str, Any] | None:
        """The options of evaluators that use a vision-language model (``select_metrics(vlm=...)``, a
        comparer's judge); ``None`` without ``vlm``."""
        from editlens.judges.ensemble import check_sampling

        check_sampling(self.samples, self.temperature, self.min_samples)  # a clear error before any model loads
        if not self.vlm:
            return None
        self.check()
        cache = {"default": True, "none": False}.get(self.cache, self.cache) if isinstance(self.cache, str) \
            else self.cache
        opts: dict[str, Any] = {"vlm": self.vlm, "vlm_model": self.vlm_model, "device": self.device,
                                "dtype": self.dtype, "templates": dict(self.templates), "cache": cache}
        if self.samples > 1 or self.temperature > 0:  # only then: settings (and cached rows) of greedy runs stay
            opts.update(samples=self.samples, temperature=self.temperature)
            if self.min_samples is not None:
                opts["min_samples"] = self.min_samples
        http = self.http_options()
        if http is not None:
            opts["http"] = http
        return opts
