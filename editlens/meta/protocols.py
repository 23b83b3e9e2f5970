"""The official meta-evaluation protocols of editing benchmarks.

Each protocol is a named function; the docstring says whose protocol it is
and what published numbers use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

AGGREGATIONS = ("official", "fisher", "mean")


# ---------------------------------------------------------------- ImagenHub

def aggregate_correlations(rs: Sequence[float], how: str = "official") -> float:
    """Combine per-method correlations.

    * ``official``: ``tanh(mean(r))`` — what ImagenHub's code does and what its
      published numbers use. The code calls it a Fisher-z average but never
      applies ``arctanh`` first; reproduce it for comparable numbers.
    * ``fisher``: the true Fisher-z average ``tanh(mean(arctanh(r)))``.
    * ``mean``: the plain mean of ``r``.

    >>> round(aggregate_correlations([0.2, 0.4], "official"), 6)
    0.291313
    >>> round(aggregate_correlations([0.2, 0.4], "mean"), 6)
    0.3
    """
    r = np.asarray([x for x in rs if np.isfinite(x)], dtype=float)
    if r.size == 0:
        return float("nan")
    if how == "official":
        return float(np.tanh(r.mean()))
    if how == "fisher":
        return float(np.tanh(np.arctanh(np.clip(r, -0.999999, 0.999999)).mean()))
    if how == "mean":
        return float(r.mean())
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")


@dataclass
class GroupedCorrelation:
    """Per-group Spearman correlations and their aggregate."""

    protocol: str
    aggregation: str
    value: float
    per_group: dict[str, float]
    n_per_group: dict[str, int]
    excluded_groups: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "aggregation": self.aggregation, "value": self.value,
                "per_group": self.per_group, "n_per_group": self.n_per_group,
                "excluded_groups": self.excluded_groups}


def grouped_spearman(pred: Mapping[str, Mapping[str, float]], human: Mapping[str, Mapping[str, float]],
                     aggregation: str, protocol: str) -> GroupedCorrelation:
    """Spearman within each group (editing method) over the items present in
    both ``pred`` and ``human``, then aggregated."""
    per, ns, excluded = {}, {}, {}
    for group in sorted(human):
        items = sorted(set(human[group]) & set(pred.get(group, {})))
        if len(items) < 2:
            excluded[group] = f"{len(items)} item(s) with both predictions and human scores"
            continue
        x = np.array([pred[group][i] for i in items], dtype=float)
        y = np.array([human[group][i] for i in items], dtype=float)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            excluded[group] = "constant scores: correlation undefined"
            continue
        per[group] = float(stats.spearmanr(x, y)[0])
        ns[group] = len(items)
    return GroupedCorrelation(protocol, aggregation, aggregate_correlations(list(per.values()), aggregation),
                              per, ns, excluded)


def imagenhub_correlation(pred: Mapping[str, Mapping[str, float]], human: Mapping[str, Mapping[str, float]],
                          aggregation: str = "official") -> GroupedCorrelation:
    """ImagenHub: Spearman per editing method between predicted and human
    scores over that method's samples, combined by ``aggregation``
    (``official`` = tanh of the mean raw r, as published)."""
    return grouped_spearman(pred, human, aggregation, "imagenhub")


def aurora_pointwise(pred: Mapping[str, Mapping[str, float]], human: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """AURORA-Bench point-wise, as ADIEE's release computes it: **one**
    Spearman over every item scored by both (all editing models pooled).
    The mean over editing models of per-model Spearman (what EditReward
    reports as AURORA point-wise) is returned beside it as a second, named
    figure, with the number of items each figure actually counts.

    Each model below is ranked perfectly within itself, but m2's scores are
    all lower while people rate its edits higher: only the pooled figure sees it.

    >>> pred = {"m1": {"a": 0.7, "b": 0.8, "c": 0.9}, "m2": {"d": 0.1, "e": 0.2, "f": 0.3}}
    >>> human = {"m1": {"a": 1, "b": 2, "c": 3}, "m2": {"d": 4, "e": 5, "f": 6}}
    >>> r = aurora_pointwise(pred, human)
    >>> round(r["value"], 4), round(r["per_model_mean"]["value"], 4), r["n_items"]
    (-0.5429, 1.0, 6)
    """
    xs, ys = [], []
    for group in sorted(human):
        for item in sorted(set(human[group]) & set(pred.get(group, {}))):
            xs.append(float(pred[group][item]))
            ys.append(float(human[group][item]))
    x, y = np.asarray(xs), np.asarray(ys)
    value = float(stats.spearmanr(x, y)[0]) if x.size >= 2 and np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan")
    per_model = grouped_spearman(pred, human, "mean", "aurora-per-model-mean").to_dict()
    return {"protocol": "aurora-pointwise", "aggregation": "one Spearman over all items (as ADIEE's release)",
            "value": value, "n_items": int(x.size),
            "per_model_mean": {**per_model, "n_items": int(sum(per_model["n_per_group"].values()))}}


# ---------------------------------------------------------------- VIEScore answers

# the parser lives with the judges (one parser for judge answers and stored ratings)
from editlens.judges.parsing import genai_verdict, parse_score_list  # noqa: E402,F401


def viescore_overall(sc: Any, pq: Any) -> tuple[float, float, float] | None:
    """VIEScore: SC = min(SC list)/10, PQ = min(PQ list)/10, clipped to
    [0, 1], O = sqrt(SC * PQ). ``None`` when either list cannot be parsed.

    >>> viescore_overall("[0, 10]", [8, 9])
    (0.0, 0.8, 0.0)
    """
    s, p = parse_score_list(sc), parse_score_list(pq)
    if s is None or p is None:
        return None
    sc_v = float(np.clip(min(s) / 10.0, 0.0, 1.0))
    pq_v = float(np.clip(min(p) / 10.0, 0.0, 1.0))
    return sc_v, pq_v, math.sqrt(sc_v * pq_v)


# ---------------------------------------------------------------- GenAI-Bench

GENAI_CORRECT = {
    "leftvote": {"[[A>B]]", "[[A>>B]]"},
    "rightvote": {"[[B>A]]", "[[B>>A]]"},
    "tievote": {"[[A=B=Good]]", "[[A=B]]"},
    "bothbad_vote": {"[[A=B=Bad]]", "[[A=B]]"},
}


def genai_bench_accuracy(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """GenAI-Bench official 4-way accuracy over all items; no verdict counts as wrong."""
    correct = no_verdict = 0
    by_vote: dict[str, list[int]] = {}
    for item in items:
        vote = item.get("human_vote")
        if vote not in GENAI_CORRECT:
            raise ValueError(f"item {item.get('idx')!r}: human_vote {vote!r} is not one of {sorted(GENAI_CORRECT)}")
        verdict = genai_verdict(item.get("response"))
        ok = verdict is not None and verdict in GENAI_CORRECT[vote]
        no_verdict += verdict is None
        correct += ok
        by_vote.setdefault(vote, []).append(int(ok))
    n = len(items)
    from editlens.meta.bootstrap import ci_or_none

    flags = [x for v in by_vote.values() for x in v]
    return {"protocol": "genai-bench", "accuracy": correct / n if n else float("nan"), "n": n,
            "ci95": ci_or_none(flags),
            "correct": correct, "no_verdict": no_verdict,
            "accuracy_by_vote": {k: sum(v) / len(v) for k, v in sorted(by_vote.items())}}


# ---------------------------------------------------------------- ADIEE's rules on two scores

#: the four GenAI-Bench outcomes, as its human votes name them
GENAI_VOTES = ("leftvote", "rightvote", "tievote", "bothbad_vote")
#: which rule turned two scores into a verdict (recorded beside every pairwise figure)
PAIRWISE_RULES = {
    "adiee-genai-4way": "ADIEE's GenAI-Bench rule: type = round(score/5); the higher type wins; equal types are a tie "
                        "only when both scores are >= 9, otherwise both bad; accuracy = exact 4-way match over all pairs",
    "adiee-3way": "ADIEE's AURORA rule: type = round(score/5); the higher type wins; equal types tie; "
                  "tie and both-bad human votes are one label",
}


def adiee_pair_verdict(score_a: float, score_b: float) -> int:
    """ADIEE's released pairwise rule on two 0-10 scores: type = round(score / 5)
    (0 fail, 1 partial, 2 success); the higher type wins, equal types tie.
    Returns +1 (A), -1 (B) or 0 (tie). The one copy of the rule: the AURORA
    protocol, the GenAI-Bench rule and ``adiee pairwise-eval`` all use it.

    >>> adiee_pair_verdict(9.0, 6.0), adiee_pair_verdict(6.0, 7.4), adiee_pair_verdict(1.0, 8.0)
    (1, 0, -1)
    """
    ta, tb = round(score_a / 5.0), round(score_b / 5.0)
    return (ta > tb) - (ta < tb)


def adiee_genai_vote(score_a: float, score_b: float, high: float = 9.0) -> str:
    """ADIEE's GenAI-Bench verdict from two 0-10 scores: the higher
    ``round(score/5)`` type wins; equal types are ``tievote`` only when both
    scores are at least ``high`` (9), otherwise ``bothbad_vote``.

    >>> adiee_genai_vote(9.0, 3.0), adiee_genai_vote(9.5, 9.1), adiee_genai_vote(6.0, 7.0), adiee_genai_vote(8.0, 9.0)
    ('leftvote', 'tievote', 'bothbad_vote', 'bothbad_vote')
    """
    verdict = adiee_pair_verdict(score_a, score_b)
    if verdict:
        return "leftvote" if verdict > 0 else "rightvote"
    return "tievote" if score_a >= high and score_b >= high else "bothbad_vote"


def adiee_genai_bench_accuracy(items: Sequence[Mapping[str, Any]], high: float = 9.0) -> dict[str, Any]:
    """ADIEE's GenAI-Bench pairwise accuracy (rule ``adiee-genai-4way``):
    each item ``{"human_vote", "score_a", "score_b"}``; the verdict of
    :func:`adiee_genai_vote` must equal the human vote exactly; over **all**
    items (a pair missing a score counts as wrong and is counted in
    ``unscored``, as the release always has a number)."""
    correct = unscored = 0
    by_vote: dict[str, list[int]] = {}
    for n, item in enumerate(items):
        vote = item.get("human_vote")
        if vote not in GENAI_VOTES:
            raise ValueError(f"item {item.get('id', n)!r}: human_vote {vote!r} is not one of {GENAI_VOTES}")
        a, b = item.get("score_a"), item.get("score_b")
        ok = False
        if a is None or b is None or not (math.isfinite(float(a)) and math.isfinite(float(b))):
            unscored += 1
        else:
            ok = adiee_genai_vote(float(a), float(b), high) == vote
        correct += ok
        by_vote.setdefault(str(vote), []).append(int(ok))
    n = len(items)
    return {"protocol": "genai-bench", "rule": "adiee-genai-4way", "rule_text": PAIRWISE_RULES["adiee-genai-4way"],
            "accuracy": correct / n if n else float("nan"), "n": n, "correct": correct, "unscored": unscored,
            "accuracy_by_vote": {k: sum(v) / len(v) for k, v in sorted(by_vote.items())}}


# ---------------------------------------------------------------- pairwise with ties

def accuracy_with_ties(human: Sequence[int], signal: Sequence[float]) -> dict[str, Any]:
    """Pairwise accuracy with tie calibration (Deutsch et al., 2023).

    ``human`` in {+1 (A better), -1 (B better), 0 (tie)}; ``signal`` is
    score(A) - score(B). The model predicts a tie when ``|signal| <= eps``;
    ``eps`` is chosen among 0 and the observed ``|signal|`` values to maximise
    accuracy (the smallest such eps is reported).

    >>> r = accuracy_with_ties([1, -1, 0], [0.5, -0.4, 0.05])
    >>> r["accuracy"], r["threshold"]
    (1.0, 0.05)
    """
    h = np.asarray(human, dtype=int)
    d = np.asarray(signal, dtype=float)
    if h.shape != d.shape or h.size == 0:
        raise ValueError("human labels and signals must be non-empty and of equal length")
    if not set(np.unique(h)) <= {-1, 0, 1}:
        raise ValueError("human labels must be +1, -1 or 0")
    a = np.abs(d)
    cands = np.unique(np.concatenate([[0.0], a]))
    order = np.argsort(a, kind="stable")
    a_sorted = a[order]
    tie_sorted = (h[order] == 0).astype(int)
    sign_ok_sorted = ((np.sign(d[order]) == h[order]) & (h[order] != 0)).astype(int)
    cum_tie = np.concatenate([[0], np.cumsum(tie_sorted)])
    suffix_ok = np.concatenate([np.cumsum(sign_ok_sorted[::-1])[::-1], [0]])
    # pairs with |d| <= eps are predicted ties: the first k sorted items
    k = np.searchsorted(a_sorted, cands, side="right")
    acc = (cum_tie[k] + suffix_ok[k]) / h.size
    best = int(np.argmax(acc))
    eps = float(cands[best])
    pred = np.where(a <= eps, 0, np.sign(d)).astype(int)
    from editlens.meta.bootstrap import ci_or_none

    # CI over resampled pairs at the chosen threshold (the threshold itself is not re-fit)
    return {"protocol": "accuracy-with-ties", "accuracy": float(acc[best]), "threshold": eps,
            "ci95": ci_or_none((pred == h).astype(float)),
            "n": int(h.size), "accuracy_at_zero": float(acc[0])}


# ---------------------------------------------------------------- retrieval

def retrieval_metrics(ranks: Sequence[int] | np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> dict[str, Any]:
    """Recall@k and mean/median rank from 1-based ranks of the correct item.

    >>> retrieval_metrics([1, 2, 10], ks=(1, 5))
    {'recall@1': 0.3333333333333333, 'recall@5': 0.6666666666666666, 'mean_rank': 4.333333333333333, 'median_rank': 2.0, 'n': 3}
    """
    r = np.asarray(ranks, dtype=float)
    if r.size == 0 or (r < 1).any():
        raise ValueError("ranks must be non-empty and 1-based")
    out: dict[str, Any] = {f"recall@{k}": float((r <= k).mean()) for k in ks}
    out.update({"mean_rank": float(r.mean()), "median_rank": float(np.median(r)), "n": int(r.size)})
    return out


def ranks_from_similarity(sim: np.ndarray) -> np.ndarray:
    """1-based rank of the diagonal (correct) entry in each row of a
    query x candidate similarity matrix; ties count against the query."""
    s = np.asarray(sim, dtype=float)
    diag = np.diag(s)[:, None]
    return (s > diag).sum(axis=1) + (s == diag).sum(axis=1)  # includes itself once
