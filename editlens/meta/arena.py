"""Ratings from pairwise verdicts: Bradley-Terry (ties as Davidson or as half
wins), bootstrap CIs over sources, the Elo display scale, which pair to judge
next, and agreement of a ranking with a human one.

Pure functions on plain numbers (no I/O, no models); the orchestration that
asks a judge lives in :mod:`editlens.runner.arena`.

A *comparison* is ``(group, a, b, outcome)``: editors ``a`` and ``b`` (indices)
compared on one source ``group``; ``outcome`` is ``1`` (a better), ``-1``
(b better) or ``0`` (a tie). Ratings are log-strengths ``theta`` (P(a beats b)
= sigmoid(theta_a - theta_b) without ties), centred on 0.

>>> comps = [(g, 0, 1, 1) for g in range(8)] + [(g, 1, 2, 1) for g in range(8)] + [(0, 0, 1, -1), (1, 1, 2, 0)]
>>> fit = fit_bradley_terry(*pair_counts(comps, 3), ties="davidson")
>>> [int(i) for i in np.argsort(-fit["theta"])], fit["ties"]
([0, 1, 2], 'davidson')
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

#: how ties enter the fit, in the output's words
TIES = {
    "davidson": "ties as Davidson (1970): P(tie) = nu * sqrt(p_a * p_b) / (p_a + p_b + nu * sqrt(p_a * p_b)), nu fitted",
    "half": "ties as half a win for each editor",
}
#: points per unit of log-strength on the Elo display scale (400 points = 10:1 odds), and its centre
ELO_PER_LOGIT = 400.0 / math.log(10.0)
ELO_CENTRE = 1000.0

Comparison = tuple[Any, int, int, int]


def pair_counts(comparisons: Sequence[Comparison], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(wins, ties)``: ``wins[i, j]`` times i beat j, ``ties[i, j]`` (symmetric) ties of i and j.

    >>> w, t = pair_counts([("s1", 0, 1, 1), ("s2", 1, 0, 1), ("s3", 0, 1, 0)], 2)
    >>> w.tolist(), t.tolist()
    ([[0.0, 1.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]])
    """
    wins = np.zeros((n, n))
    ties = np.zeros((n, n))
    for _, a, b, o in comparisons:
        if o > 0:
            wins[a, b] += 1
        elif o < 0:
            wins[b, a] += 1
        else:
            ties[a, b] += 1
            ties[b, a] += 1
    return wins, ties


def _nll_half(theta: np.ndarray, w: np.ndarray, prior: float) -> tuple[float, np.ndarray]:
    d = theta[:, None] - theta[None, :]
    log_s = -np.logaddexp(0.0, -d)  # log sigmoid(theta_i - theta_j)
    s = np.exp(log_s)
    nll = -float(np.sum(w * log_s)) + 0.5 * prior * float(theta @ theta)
    grad = -(np.sum(w * (1 - s), axis=1) - np.sum(w.T * (1 - s.T), axis=1)) + prior * theta
    return nll, grad


def _nll_davidson(params: np.ndarray, w: np.ndarray, t: np.ndarray, prior: float) -> tuple[float, np.ndarray]:
    theta, phi = params[:-1], params[-1]
    n_pair = w + w.T + t  # symmetric: comparisons of i and j
    h = 0.5 * (theta[:, None] - theta[None, :])
    log_rel = np.logaddexp(np.logaddexp(h, -h), phi)  # log(D / exp(mean theta)) of each pair
    m = 0.5 * (theta[:, None] + theta[None, :])
    upper = np.triu(np.ones_like(w), 1)
    ll = (float(np.sum(w * theta[:, None])) + float(np.sum(upper * t * (phi + m)))
          - float(np.sum(upper * n_pair * (m + log_rel))))
    # d log D / d theta_i = (e^{h} + e^{phi}/2) / rel; d log D / d phi = e^{phi} / rel
    share_i = (np.exp(h - log_rel) + 0.5 * np.exp(phi - log_rel))
    g_theta = np.sum(w, axis=1) + 0.5 * np.sum(t, axis=1) - np.sum(n_pair * share_i, axis=1)
    g_phi = float(np.sum(upper * (t - n_pair * np.exp(phi - log_rel))))
    nll = -ll + 0.5 * prior * (float(theta @ theta) + phi * phi)
    grad = -np.concatenate([g_theta, [g_phi]]) + prior * params
    return nll, grad


def fit_bradley_terry(wins: np.ndarray, tie_counts: np.ndarray | None = None, *, ties: str = "davidson",
                      prior: float = 0.01, start: np.ndarray | None = None) -> dict[str, Any]:
    """Maximum a-posteriori Bradley-Terry log-strengths from win and tie counts.

    ``ties="davidson"`` fits Davidson's tie parameter ``nu`` with the
    strengths; ``"half"`` counts a tie as half a win for each side. A weak
    Gaussian prior (precision ``prior``) keeps an editor that never won (or
    a run of nothing but ties) finite. ``tie_counts``: symmetric tie counts.
    Returns ``{"theta" (centred), "nu" (Davidson; None for half wins), "ties"}``.
    The objective is convex: Newton's method with a backtracking line search.

    >>> w = np.array([[0, 30], [10, 0]], dtype=float)
    >>> r = fit_bradley_terry(w, ties="half")
    >>> round(float(r["theta"][0] - r["theta"][1]), 2), r["nu"]   # log(30/10) = 1.10, shrunk a hair
    (1.1, None)
    >>> all_ties = fit_bradley_terry(np.zeros((2, 2)), np.array([[0, 9.0], [9.0, 0]]))
    >>> bool(abs(all_ties["theta"][0] - all_ties["theta"][1]) < 1e-6), all_ties["nu"] > 5
    (True, True)
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")
    w = np.asarray(wins, dtype=float)
    t = np.zeros_like(w) if tie_counts is None else np.asarray(tie_counts, dtype=float)
    n = w.shape[0]
    if ties == "half":
        x0 = np.zeros(n) if start is None else np.asarray(start[:n], dtype=float)
        wh = w + 0.5 * t
        x = _newton(lambda v: _nll_half(v, wh, prior), x0)
        theta, nu = x, None
    else:
        x0 = np.zeros(n + 1) if start is None or len(start) != n + 1 else np.asarray(start, dtype=float)
        x = _newton(lambda v: _nll_davidson(v, w, t, prior), x0)
        theta, nu = x[:-1], float(math.exp(x[-1]))
    return {"theta": theta - theta.mean(), "nu": nu, "ties": ties, "_x": x}


def _newton(f: Any, x: np.ndarray, tol: float = 1e-9, max_iter: int = 100) -> np.ndarray:
    """Minimise a smooth convex ``f`` (returning value and gradient): Newton steps with a
    central-difference Hessian of the gradient, halved until the value goes down."""
    value, grad = f(x)
    eps = 1e-5
    for _ in range(max_iter):
        k = len(x)
        hess = np.empty((k, k))
        for i in range(k):
            e = np.zeros(k)
            e[i] = eps
            hess[:, i] = (f(x + e)[1] - f(x - e)[1]) / (2 * eps)
        hess = 0.5 * (hess + hess.T)
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            step = grad
        size = 1.0
        while size > 1e-8:
            cand = x - size * step
            v2, g2 = f(cand)
            if v2 <= value + 1e-12:
                break
            size /= 2
        else:
            break
        done = abs(value - v2) < tol * (1 + abs(value)) and float(np.max(np.abs(g2))) < 1e-6
        x, value, grad = cand, v2, g2
        if done:
            break
    return x


def fit(comparisons: Sequence[Comparison], n: int, ties: str = "davidson", prior: float = 0.01) -> dict[str, Any]:
    """:func:`fit_bradley_terry` of a list of comparisons.

    >>> r = fit([("s", 0, 1, 0), ("t", 0, 1, 0)], 2, ties="half")
    >>> [round(float(x), 6) + 0.0 for x in r["theta"]]
    [0.0, 0.0]
    """
    w, t = pair_counts(comparisons, n)
    return fit_bradley_terry(w, t, ties=ties, prior=prior)


#: fewer sources than this behind an editor's verdicts: no CI, no rank CI, no "better in x%" (say "too few")
MIN_SOURCES = 5
#: two log-strengths closer than this are equal (a fit of equal data differs only by floating-point noise)
EQUAL = 1e-6


def identifiability(comparisons: Sequence[Comparison], n: int) -> dict[str, Any]:
    """What the comparisons can and cannot tell apart.

    * ``components``: groups of editors linked by comparisons (directly or
      through others; ties count). Editors of different components were never
      compared, even indirectly: their ratings are on unrelated scales and
      they have no order.
    * ``blocks``: within a component, the groups that each beat or tied the
      others at least once (strongly connected components of "i was not worse
      than j once"). A component of several blocks is *separated*: an upper
      block won every comparison against a lower one, so the maximum-likelihood
      gap between them is infinite and any finite rating is the prior's.
      ``above[b]``: the blocks block ``b`` won every comparison against (directly).
    * ``sources``: per editor, the number of sources with a verdict on it.

    >>> r = identifiability([(0, 0, 1, 1), (1, 0, 1, 1), (2, 2, 3, -1), (3, 2, 3, 1)], 4)
    >>> r["components"], r["blocks"], r["separated"]
    ([[0, 1], [2, 3]], [[0], [1], [2, 3]], [[[0], [1]]])
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    wins, ties = pair_counts(comparisons, n)
    linked = (wins + wins.T + ties) > 0
    k, label = connected_components(csr_matrix(linked), directed=False)
    components = sorted(([i for i in range(n) if label[i] == c] for c in range(k)), key=lambda g: g[0])
    not_worse = (wins + ties) > 0  # i -> j: i beat or tied j at least once
    kb, blabel = connected_components(csr_matrix(not_worse), directed=True, connection="strong")
    blocks = sorted(([i for i in range(n) if blabel[i] == b] for b in range(kb)), key=lambda g: g[0])
    block_of = {i: bi for bi, g in enumerate(blocks) for i in g}
    above: dict[int, set[int]] = {bi: set() for bi in range(len(blocks))}
    for i in range(n):
        for j in range(n):
            if linked[i, j] and block_of[i] != block_of[j] and not_worse[i, j]:
                above[block_of[i]].add(block_of[j])
    separated = []
    for comp in components:
        bs = sorted({block_of[i] for i in comp})
        if len(bs) > 1:
            separated.append([blocks[b] for b in bs])
    sources: dict[int, set[Any]] = {i: set() for i in range(n)}
    for g, a, b, _ in comparisons:
        sources[a].add(g)
        sources[b].add(g)
    return {"components": components, "component_of": [int(label[i]) for i in range(n)], "blocks": blocks,
            "block_of": [block_of[i] for i in range(n)], "above": {b: sorted(v) for b, v in above.items()},
            "separated": separated, "sources": [len(sources[i]) for i in range(n)],
            "decided": int(sum(1 for c in comparisons if c[3] != 0)), "ties": int(sum(1 for c in comparisons if c[3] == 0))}


def _component_ids(ident: Mapping[str, Any], n: int) -> np.ndarray:
    comp = np.zeros(n, dtype=int)
    for ci, g in enumerate(ident["components"]):
        comp[g] = ci
    return comp


def bootstrap_ratings(comparisons: Sequence[Comparison], n: int, ties: str = "davidson", n_boot: int = 200,
                      level: float = 0.95, seed: int = 0, prior: float = 0.01,
                      ranked: Sequence[bool] | None = None, min_sources: int = MIN_SOURCES) -> dict[str, Any]:
    """Ratings with percentile bootstrap CIs, **resampling sources** (all
    comparisons of a source stay together, as they share its image), and what
    the data cannot support (:func:`identifiability`).

    Returns ``{"theta", "nu", "ties", "ci" (n x 2), "rank_ci" (n x 2, 1 =
    best), "p_better" (n x n: share of resamples where i's rating beats j's,
    equal ratings counting half), "identifiability", "estimable", "notes"}``.
    ``ranked``: which editors take part in the ranking (default all); the
    others are rated but their ``rank_ci`` is ``None`` and they take no rank.

    What the data cannot support is ``None``, never a number: ``p_better`` of
    editors in different components (never compared, even through others);
    ``ci``, ``rank_ci`` and ``p_better`` of an editor with verdicts on fewer
    than ``min_sources`` sources ("too few"); ``rank_ci`` and ``p_better``
    when no verdict was decided (all ties: no order); ``ci`` of every editor of
    a separated component (its finite ratings are the prior's), with
    ``estimable[i]`` False. Ranks (``rank_ci``) count only the editors of the
    same component. ``nu`` is ``None`` unless Davidson's tie parameter was
    fitted from both ties and decided verdicts.

    >>> comps = [(g, 0, 1, 1 if g % 4 else -1) for g in range(40)]
    >>> r = bootstrap_ratings(comps, 2, ties="half", n_boot=100)
    >>> bool(r["ci"][0][0] < r["theta"][0] < r["ci"][0][1]), r["rank_ci"][0], float(r["p_better"][0][1]) > 0.95
    (True, [1, 1], True)
    >>> one = bootstrap_ratings([("s", 0, 1, 1)], 2, ties="half", n_boot=20)
    >>> one["ci"], one["rank_ci"], one["p_better"][0][1], one["notes"][0][:40]
    ([None, None], [None, None], None, 'too few sources: 0, 1 have verdicts on 1')
    """
    ident = identifiability(comparisons, n)
    point = fit(comparisons, n, ties, prior)
    mask = np.ones(n, dtype=bool) if ranked is None else np.asarray(ranked, dtype=bool)
    notes: list[str] = []
    few = np.array([s < min_sources for s in ident["sources"]])
    separated = np.zeros(n, dtype=bool)
    for blocks in ident["separated"]:
        for g in blocks:
            separated[g] = True
    comp = _component_ids(ident, n)
    no_order = ident["decided"] == 0
    nu = point["nu"] if ties == "davidson" and ident["decided"] and ident["ties"] else None
    if not comparisons:
        return {"theta": np.full(n, np.nan), "nu": None, "ties": ties, "ci": [None] * n, "rank_ci": [None] * n,
                "p_better": [[None] * n for _ in range(n)], "n_boot": n_boot, "level": level,
                "identifiability": ident, "estimable": [False] * n, "too_few": [True] * n,
                "notes": ["no comparison gave a verdict: nothing to rate"], "min_sources": min_sources}
    groups: dict[Any, list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault(c[0], []).append(c)
    keys = list(groups)
    per_group = [pair_counts(groups[k], n) for k in keys]
    rng = np.random.default_rng(seed)
    thetas = np.empty((n_boot, n))
    for b in range(n_boot):
        pick = rng.integers(0, len(keys), size=len(keys)) if keys else np.zeros(0, dtype=int)
        counts = np.bincount(pick, minlength=len(keys))
        w = np.zeros((n, n))
        t = np.zeros((n, n))
        for k, c in enumerate(counts):
            if c:
                w += c * per_group[k][0]
                t += c * per_group[k][1]
        thetas[b] = fit_bradley_terry(w, t, ties=ties, prior=prior, start=point["_x"])["theta"]
    alpha = (1 - level) / 2
    lo, hi = np.quantile(thetas, [alpha, 1 - alpha], axis=0)
    # an editor's rank in a resample: 1 + the ranked editors of its component rated above it (equal share a rank)
    above = thetas[:, None, :] > thetas[:, :, None] + EQUAL  # [b, i, j]: j above i
    same = (comp[:, None] == comp[None, :]) & mask[None, :]
    ranks = 1 + (above & same[None]).sum(axis=2)
    rlo, rhi = np.quantile(ranks, [alpha, 1 - alpha], axis=0)
    diff = thetas[:, :, None] - thetas[:, None, :]
    p = ((diff > EQUAL).mean(axis=0) + 0.5 * (np.abs(diff) <= EQUAL).mean(axis=0))
    p_better: list[list[float | None]] = [[None if (i == j or comp[i] != comp[j] or few[i] or few[j] or no_order)
                                           else float(p[i, j]) for j in range(n)] for i in range(n)]
    ci: list[list[float] | None] = [None if (few[i] or separated[i]) else [float(lo[i]), float(hi[i])]
                                    for i in range(n)]
    rank_ci = [[int(round(a)), int(round(b))] if mask[i] and not few[i] and not no_order else None
               for i, (a, b) in enumerate(zip(rlo, rhi))]
    if few.any():
        who = [i for i in range(n) if few[i]]
        notes.append(f"too few sources: {', '.join(map(str, who))} have verdicts on "
                     f"{', '.join(str(ident['sources'][i]) for i in who)} source(s), under {min_sources}: no CI, "
                     "no rank CI and no share of resamples for them")
    return {"theta": point["theta"], "nu": nu, "ties": ties, "ci": ci, "rank_ci": rank_ci, "p_better": p_better,
            "n_boot": n_boot, "level": level, "identifiability": ident, "estimable": [not bool(x) for x in separated],
            "too_few": [bool(x) for x in few], "notes": notes, "min_sources": min_sources}


def elo_scale(theta: Sequence[float] | np.ndarray) -> np.ndarray:
    """Log-strengths on the Elo display scale (centre 1000; 400 points = 10:1 odds).

    >>> elo_scale([0.0, math.log(10)]).round(1).tolist()
    [1000.0, 1400.0]
    """
    return ELO_CENTRE + ELO_PER_LOGIT * np.asarray(theta, dtype=float)


def order_uncertainty(wins: np.ndarray, ties: np.ndarray, theta: np.ndarray, prior: float = 0.01) -> np.ndarray:
    """``P[i, j]``: the (normal-approximation) probability that the order of i
    and j given by ``theta`` is wrong, from the Fisher information of the
    comparisons made so far. Close editors compared little score near 0.5;
    pairs settled by many comparisons near 0.

    >>> w = np.array([[0, 40, 3], [1, 0, 0], [0, 0, 0]], dtype=float)
    >>> p = order_uncertainty(w, np.zeros((3, 3)), fit_bradley_terry(w, ties="half")["theta"])
    >>> bool(p[0, 1] < 0.01), bool(p[1, 2] > 0.2)
    (True, True)
    """
    from scipy.stats import norm

    n_pair = wins + wins.T + ties
    d = theta[:, None] - theta[None, :]
    s = 1.0 / (1.0 + np.exp(-d))
    info = n_pair * s * (1 - s)
    h = np.diag(info.sum(axis=1)) - info + prior * np.eye(len(theta))
    cov = np.linalg.inv(h)
    var = np.diag(cov)[:, None] + np.diag(cov)[None, :] - 2 * cov
    z = np.abs(d) / np.sqrt(np.maximum(var, 1e-12))
    p = norm.sf(z)
    np.fill_diagonal(p, 0.0)
    return p


def unsettled_neighbours(theta: np.ndarray, p_wrong: np.ndarray, stop_at: float) -> list[tuple[float, int, int]]:
    """``(p, upper, lower)`` of each pair of neighbours in the order of ``theta`` whose
    probability of the wrong order ``p_wrong[upper, lower]`` is ``stop_at`` or more, most
    doubtful first. Empty: the order is settled (every neighbour below ``stop_at``;
    the order of non-neighbours follows).

    >>> p = np.array([[0, 0.001, 0.0], [0.001, 0, 0.2], [0.0, 0.2, 0]])
    >>> unsettled_neighbours(np.array([1.0, 0.0, -0.5]), p, 0.01)
    [(0.2, 1, 2)]
    """
    order = [int(i) for i in np.argsort(-np.asarray(theta), kind="stable")]
    out = [(float(p_wrong[a, b]), a, b) for a, b in zip(order, order[1:]) if p_wrong[a, b] >= stop_at]
    return sorted(out, key=lambda x: -x[0])


def settling_pairs(i: int, j: int, theta: np.ndarray, remaining: Mapping[tuple[int, int], Sequence[Any]]) -> list[tuple[int, int]]:
    """The editor pairs whose comparisons settle the order of ``i`` and ``j``, in order
    of use: ``(i, j)`` itself while it has sources left, then through third editors
    ``k`` (``(i, k)`` and ``(k, j)``, those rated nearest the two first, as they tell
    most). ``remaining[(a, b)]`` (``a < b``): what is left to compare of that pair.

    >>> settling_pairs(0, 2, np.array([1.0, 0.5, 0.0, -3.0]), {(0, 2): [], (0, 1): [7], (1, 2): [7], (2, 3): [1]})
    [(0, 1), (1, 2), (2, 3)]
    """
    def key(a: int, b: int) -> tuple[int, int]:
        return (a, b) if a < b else (b, a)

    out = [key(i, j)] if remaining.get(key(i, j)) else []
    mid = 0.5 * (float(theta[i]) + float(theta[j]))
    for k in sorted((k for k in range(len(theta)) if k not in (i, j)), key=lambda k: abs(float(theta[k]) - mid)):
        out += [p for p in (key(i, k), key(k, j)) if remaining.get(p)]
    return out


#: editors both rankings must share for a rank correlation (over two, Kendall's tau is +-1 whatever the data)
MIN_AGREEMENT_EDITORS = 3


def rank_agreement(ratings: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, Any]:
    """Kendall τ (τ-b, ties handled) and Spearman ρ between two rankings of the
    same editors (higher = better in both), over the editors both rank. Fewer
    than three shared editors, or a ranking that puts them all level: both
    ``None`` with ``why``.

    >>> r = rank_agreement({"a": 3, "b": 2, "c": 1}, {"a": 10, "b": 5, "c": 7})
    >>> r["n"], round(r["kendall"], 3), round(r["spearman"], 3)
    (3, 0.333, 0.5)
    >>> rank_agreement({"a": 2, "b": 1}, {"a": 1, "b": 2})["why"]
    'too few editors in both rankings (2): a rank correlation needs at least 3'
    """
    from scipy.stats import kendalltau, spearmanr

    common = [k for k in ratings if k in reference]
    out: dict[str, Any] = {"n": len(common), "editors": common, "kendall": None, "spearman": None}
    if len(common) < MIN_AGREEMENT_EDITORS:
        out["why"] = (f"too few editors in both rankings ({len(common)}): a rank correlation needs at least "
                      f"{MIN_AGREEMENT_EDITORS}")
        return out
    x = [float(ratings[k]) for k in common]
    y = [float(reference[k]) for k in common]
    if len(set(x)) > 1 and len(set(y)) > 1:
        out["kendall"] = float(kendalltau(x, y).statistic)
        out["spearman"] = float(spearmanr(x, y).statistic)
    else:
        out["why"] = ("the arena" if len(set(x)) == 1 else "the reference") + " ranks every shared editor level"
    return out
