"""Scoring that one bad sample cannot spoil for the others.

* When an evaluator raises on a batch, its samples are scored again one by
  one: only the culprit fails, with its reason; the rest keep their scores.
* A score whose reason is a backend failure (time-out, 5xx after retries,
  connection reset, a body that is no answer) is ``failed``, not
  ``unscored``: nothing was answered, and a rerun retries it.
"""

from __future__ import annotations

from typing import Any, Sequence

from editlens.backends.types import is_backend_failure
from editlens.core.types import LoadedEdit, Score
from editlens.errors import ModelUnavailableError


def failure_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def settle(score: Score) -> Score:
    """``unscored`` because the backend failed -> ``failed`` (raw text kept).

    >>> settle(Score("viescore", None, "unscored", "backend error: HTTP 503")).status
    'failed'
    >>> settle(Score("viescore", None, "unscored", "SC answer has no two 0-10 scores")).status
    'unscored'
    """
    if score.status == "unscored" and is_backend_failure(score.reason):
        return Score(score.metric, None, "failed", score.reason, score.details)
    return score


def score_isolated(evaluator: Any, batch: Sequence[LoadedEdit]) -> list[Score]:
    """``evaluator.score_batch(batch)``; if it raises, each sample alone.

    :class:`ModelUnavailableError` is not isolated: every sample would fail
    the same way, so it stops the run with its fix.
    """
    try:
        scores = evaluator.score_batch(list(batch))
        if len(scores) != len(batch):
            raise RuntimeError(f"{evaluator.name}: returned {len(scores)} scores for {len(batch)} samples")
        return [settle(s) for s in scores]
    except ModelUnavailableError:
        raise
    except Exception as exc:
        if len(batch) == 1:
            return [Score(evaluator.name, None, "failed", failure_reason(exc))]
    out = []
    for sample in batch:
        try:
            (score,) = evaluator.score_batch([sample])
            out.append(settle(score))
        except ModelUnavailableError:
            raise
        except Exception as exc:
            out.append(Score(evaluator.name, None, "failed", failure_reason(exc)))
    return out
