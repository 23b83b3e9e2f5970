"""Self-ensembling: a judge asks the same question ``samples`` times at
``temperature`` > 0 and combines the answers it could parse.

Each sampled answer is its own request (same prompt, seed = base seed + k),
so the response cache stores every sample separately: raising ``samples``
from 3 to 5 reuses the first three answers and asks only two more.

The score is the mean over the parsed answers; ``details`` keep the spread
(``std``, and ``agreement`` for verdicts: the share of parsed answers that
agree with the majority), the count of unscored answers and each answer's
own outcome.

Nothing is hidden: a sample lost to the transport (time-out, 5xx, an empty
body) makes the whole row *failed*, so a rerun asks again; the samples that
did come back are in the response cache and are not asked twice. A score
needs ``min_samples`` parsed answers (default: every one requested); with
fewer the row is *unscored*, with every answer kept.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Sequence

from editlens.backends.types import ChatRequest, Generation, is_backend_failure
from editlens.core.types import Score


@dataclass
class Outcome:
    """What one answer gave: a value (and details), or the problem."""

    value: float | None
    details: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    raw: Any = None
    vote: Hashable | None = None  # for verdicts: the answer's decision


def check_sampling(samples: int, temperature: float, min_samples: int | None = None) -> None:
    if int(samples) != samples or samples < 1:
        raise ValueError(f"samples must be a whole number >= 1, got {samples!r}")
    if min_samples is not None and (int(min_samples) != min_samples or not 1 <= min_samples <= samples):
        raise ValueError(f"min_samples (--min-samples) must be a whole number from 1 to samples ({samples}), "
                         f"got {min_samples!r}")
    if samples > 1 and temperature <= 0:
        raise ValueError(f"samples={samples} needs temperature > 0 (greedy decoding repeats one answer); "
                         "pass --temperature, e.g. 0.7")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")


def expand(requests: Sequence[ChatRequest], samples: int, temperature: float, seed: int = 0) -> list[ChatRequest]:
    """Each request ``samples`` times, sample ``k`` with seed ``seed + k``
    (one answer per request, so each is cached on its own)."""
    if temperature <= 0:
        return [replace(r, settings=replace(r.settings, temperature=0.0, n=1, seed=None)) for r in requests]
    return [replace(r, settings=replace(r.settings, temperature=temperature, n=1, seed=seed + k))
            for r in requests for k in range(samples)]


def regroup(gens: Sequence[Generation], samples: int) -> list[list[Generation]]:
    return [list(gens[i : i + samples]) for i in range(0, len(gens), samples)]


def lost_to_transport(name: str, outcomes: Sequence[Outcome]) -> Score | None:
    """A *failed* score when any sample's request failed (retried on rerun;
    the samples that came back are cached), else ``None``."""
    lost = [o for o in outcomes if is_backend_failure(o.problem)]
    if not lost:
        return None
    if len(outcomes) == 1:
        return Score(name, None, "failed", lost[0].problem, {"raw": lost[0].raw, **lost[0].details})
    per = [{"problem": o.problem} if is_backend_failure(o.problem) else
           ({"value": o.value, **o.details} if o.value is not None else {"problem": o.problem, "raw": o.raw})
           for o in outcomes]
    return Score(name, None, "failed",
                 f"{lost[0].problem} ({len(lost)} of {len(outcomes)} sampled requests lost; a rerun asks only those)",
                 {"samples": len(outcomes), "failed_samples": len(lost), "per_sample": per})


def combine(name: str, outcomes: Sequence[Outcome], min_samples: int | None = None) -> Score:
    """One :class:`Score` from the outcomes of one sample's answers.

    ``min_samples``: parsed answers needed for a score (default: all of them).
    """
    failed = lost_to_transport(name, outcomes)
    if failed is not None:
        return failed
    if len(outcomes) == 1:
        o = outcomes[0]
        if o.value is None:
            return Score(name, None, "unscored", o.problem or "no answer", {"raw": o.raw, **o.details})
        return Score(name, o.value, details=dict(o.details))
    need = len(outcomes) if min_samples is None else min(int(min_samples), len(outcomes))
    parsed = [o for o in outcomes if o.value is not None]
    per = [({"value": o.value, **o.details} if o.value is not None else {"problem": o.problem, "raw": o.raw})
           for o in outcomes]
    if len(parsed) < need:
        reasons = Counter(o.problem or "no answer" for o in outcomes if o.value is None)
        top = "; ".join(f"{r} (x{n})" for r, n in reasons.most_common(3))
        what = (f"none of the {len(outcomes)} sampled answers could be used" if not parsed else
                f"only {len(parsed)} of {len(outcomes)} sampled answers could be used, {need} needed "
                "(--min-samples)")
        return Score(name, None, "unscored", f"{what}: {top}",
                     {"raw": [o.raw for o in outcomes], "samples": len(outcomes), "parsed_samples": len(parsed),
                      "unscored_samples": len(outcomes) - len(parsed), "min_samples": need, "per_sample": per})
    vals = [float(o.value) for o in parsed]  # type: ignore[arg-type]
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    details: dict[str, Any] = {"samples": len(outcomes), "parsed_samples": len(parsed),
                               "unscored_samples": len(outcomes) - len(parsed), "std": std, "values": vals,
                               "per_sample": per}
    votes = [o.vote for o in parsed if o.vote is not None]
    if votes:
        top_vote, count = Counter(votes).most_common(1)[0]
        details["majority"] = top_vote
        details["agreement"] = count / len(votes)
    return Score(name, mean, details=details)


def majority(votes: Sequence[Hashable | None]) -> tuple[Hashable | None, float | None, int]:
    """``(majority vote, agreement, unusable count)``; a tie has no majority (``None``)."""
    usable = [v for v in votes if v is not None]
    if not usable:
        return None, None, len(votes)
    ranked = Counter(usable).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None, ranked[0][1] / len(usable), len(votes) - len(usable)
    return ranked[0][0], ranked[0][1] / len(usable), len(votes) - len(usable)
