"""`--adaptive` pairwise assignment: the arena's scheduler picks the next pair each annotator sees. Simulated
annotators who prefer editors by known Bradley-Terry strengths reach the same confidence in the editors' order
with fewer votes than a uniform plan."""

from __future__ import annotations

import math
import random

import pytest

from editlens.annotate.plan import comparisons_of, editors_of
from editlens.annotate.task import Task
from editlens.meta.arena import fit, order_uncertainty, pair_counts
from editlens.testing.annotate_data import answer_as_shown, make_edit_set

STRENGTH = [1.6, 0.8, 0.0, -0.8, -1.6]  # editor0 .. editor4
ANNOTATORS = ["p1", "p2", "p3", "p4"]


def _confident(task, votes) -> bool:
    """The fitted order is the true one and every neighbour's order is wrong with probability < 0.05."""
    editors = editors_of(task.items)
    comps = [(g, a, b, o) for g, a, b, o in comparisons_of(task.items, votes, editors)]
    if len(comps) < 10:
        return False
    w, t = pair_counts(comps, len(editors))
    theta = fit(comps, len(editors), "davidson")["theta"]
    order = sorted(range(len(editors)), key=lambda i: -theta[i])
    if [editors[i] for i in order] != [f"editor{k}" for k in range(5)]:
        return False
    p = order_uncertainty(w, t, theta)
    return all(p[order[k], order[k + 1]] < 0.05 for k in range(len(order) - 1))


def _votes_needed(task, seed, cap=600) -> int:
    rng = random.Random(seed)
    n = 0
    while n < cap:
        moved = False
        for a in ANNOTATORS:
            row = task.current(a)
            if row is None:
                continue
            it = task.items[row["item"]]
            sa, sb = (STRENGTH[int(it[s]["editor"][-1])] for s in ("a", "b"))
            choice = "A" if rng.random() < 1 / (1 + math.exp(-(sa - sb))) else "B"
            task.vote(a, row["position"], answer_as_shown(it, row["left"], {"choice": choice}))
            n += 1
            moved = True
            if n % 5 == 0 and _confident(task, task.store.votes()):
                return n
        if not moved:
            break
    return cap


@pytest.mark.slow
def test_adaptive_needs_fewer_votes_than_uniform(tmp_path):
    edits = make_edit_set(tmp_path / "e", sources=25, editors=5, size=16)  # 10 editor pairs x 25 sources
    adaptive, uniform = [], []
    for seed in range(3):
        t = Task.create(tmp_path / f"a{seed}", edits, "pairwise", annotators=ANNOTATORS, seed=seed, adaptive=150)
        assert all(r["item"] is None for r in t.store.assignments())  # filled as they are reached
        adaptive.append(_votes_needed(t, seed))
        filled = [r for r in t.store.assignments() if r["item"] is not None]
        # an annotator never sees the same pair twice; the picks are recorded with their sides
        for a in ANNOTATORS:
            mine = [r["item"] for r in filled if r["annotator"] == a]
            assert len(mine) == len(set(mine)) and all(r["left"] for r in filled)
        t.close()
        t = Task.create(tmp_path / f"u{seed}", edits, "pairwise", annotators=ANNOTATORS, seed=seed, overlap=2)
        uniform.append(_votes_needed(t, seed))
        t.close()
    assert sum(adaptive) < 0.85 * sum(uniform), (adaptive, uniform)
