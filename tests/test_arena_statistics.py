"""The arena's statistics where the verdicts cannot support a number: separation, one source,
unconnected editors, all ties, no verdict; "settled" only when every neighbour's order is; a budget
samples the first round at random; the human ranking validated; nu only when fitted.

Verdicts come from a simulated judge (a test double drawing each verdict from the Davidson model
of known strengths: it stands in for a judge so the statistics can be checked against the truth)
or from fixed verdict tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from editlens.cli.arena_commands import arena_lines
from editlens.cli.main import app
from editlens.errors import InputError
from editlens.meta.arena import (
    bootstrap_ratings,
    fit,
    identifiability,
    order_uncertainty,
    pair_counts,
    rank_agreement,
    unsettled_neighbours,
)
from editlens.runner.arena import Contest, read_human_ranking, run_arena

pytestmark = pytest.mark.once
runner = CliRunner()


class Judge:
    """Verdicts from the Davidson model of ``strengths`` (log-strengths; ``nu`` ties), or from ``table``:
    ``{(a, b): label}`` (a fixed verdict per editor pair, ``a`` better for 1)."""

    name = "simulated"

    def __init__(self, strengths=None, seed: int = 0, nu: float = 0.3, table=None):  # type: ignore[no-untyped-def]
        self.strengths, self.table = strengths, table
        self.rng = np.random.default_rng(seed)
        self.nu = nu
        self.asked = 0

    def identity(self) -> dict:
        return {"simulated": [self.nu, sorted((self.strengths or {}).items()), sorted(map(str, (self.table or {}).items()))]}

    def compare(self, items, batch_size=8):  # type: ignore[no-untyped-def]
        out = []
        for it in items:
            self.asked += 1
            _, a, b = it.id.split("|")
            if self.table is not None:
                label = self.table[(a, b)] if (a, b) in self.table else self.table[(b, a)]
                label = None if label is None else label if (a, b) in self.table else -label
                if label is None:
                    out.append({"id": it.id, "verdict": None, "label": None, "reason": "unparsable: 'maybe'",
                                "raw": "maybe"})
                    continue
            else:
                pa, pb = math.exp(self.strengths[a]), math.exp(self.strengths[b])
                u = self.rng.random() * (pa + pb + self.nu * math.sqrt(pa * pb))
                label = 1 if u < pa else -1 if u < pa + pb else 0
            out.append({"id": it.id, "verdict": {1: "A>B", -1: "B>A", 0: "A=B"}[label], "label": label})
        return out


def contests(n: int, editors, per_source=None) -> list[Contest]:  # type: ignore[no-untyped-def]
    """``n`` sources edited by ``editors`` (or by ``per_source(k)`` editors on source k)."""
    out = []
    for k in range(n):
        ms = per_source(k) if per_source else editors
        out.append(Contest(f"s{k}", f"s{k}.png", "edit", {m: f"{k}_{m}.png" for m in ms}, {m: f"{k}/{m}" for m in ms}))
    return out


# ------------------------------------------------------------------------------------------------ 10. separation

def test_an_editor_that_never_loses_gets_a_statement_not_a_prior_rating(tmp_path):
    # a beats everyone on every source; b, c, d are a real contest among themselves
    table = {("a", "b"): 1, ("a", "c"): 1, ("a", "d"): 1, ("b", "c"): 1, ("c", "d"): 1, ("b", "d"): 1}
    rng = np.random.default_rng(0)

    class Mixed(Judge):
        def compare(self, items, batch_size=8):  # type: ignore[no-untyped-def]
            out = []
            for it in items:
                _, x, y = it.id.split("|")
                label = self.table.get((x, y), None) if "a" in (x, y) else int(rng.choice([1, -1]))
                if label is None:
                    label = -self.table[(y, x)]
                out.append({"id": it.id, "verdict": "A>B" if label > 0 else "B>A", "label": label})
            return out

    doc = run_arena(contests(30, "abcd"), Mixed(table=table), tmp_path, seed=0, n_boot=50)
    rows = {r["editor"]: r for r in doc["editors"]}
    assert rows["a"]["losses"] == 0 and rows["a"]["rank"] == 1
    for m in "abcd":  # the whole group is on an unbounded scale: no number from the prior
        assert rows[m]["rating"] is None and rows[m]["ci"] is None and rows[m]["elo"] is None
        assert "separation" in rows[m]["rating_note"]
    note = next(n for n in doc["notes"] if n.startswith("separation"))
    assert note.startswith("separation: {a} > {b, c, d}") and "not estimable" in note
    lines = "\n".join(arena_lines(doc))
    assert "separated" in lines and "separation: {a} > {b, c, d}" in lines
    # the statistics alone say the same
    comps = [(g, 0, j, 1) for g in range(10) for j in (1, 2)] + [(g, 1, 2, 1 if g % 2 else -1) for g in range(10)]
    boot = bootstrap_ratings(comps, 3, n_boot=30)
    assert boot["estimable"] == [False, False, False] and boot["ci"] == [None, None, None]
    assert identifiability(comps, 3)["separated"] == [[[0], [1, 2]]]


def test_perfectly_consistent_verdicts_are_an_order_without_ratings(tmp_path):
    table = {(x, y): 1 for i, x in enumerate("abc") for y in "abc"[i + 1:]}
    doc = run_arena(contests(8, "abc"), Judge(table=table), tmp_path, n_boot=30)
    assert [r["editor"] for r in doc["editors"]] == ["a", "b", "c"] and [r["rank"] for r in doc["editors"]] == [1, 2, 3]
    assert all(r["rating"] is None and r["elo"] is None for r in doc["editors"])
    assert any(n.startswith("separation: {a} > {b} > {c}: each group won every comparison with the next")
               for n in doc["notes"])


def test_separation_without_a_chain_is_not_called_one():
    from editlens.runner.arena import _Judged, ratings_document

    # a beat b and c on every source; b and c were never compared: no order between b and c
    judged = [_Judged(g, 0, j, {"label": 1}) for g in range(6) for j in (1, 2)]
    doc = ratings_document(["a", "b", "c"], [None] * 6, judged, ties="half", n_boot=20, seed=0)  # type: ignore[list-item]
    note = next(n for n in doc["notes"] if n.startswith("separation"))
    assert " > " not in note.split(":")[1] and "every verdict went the same way" in note


# ------------------------------------------------------------------------------------------------ 11. one source

def test_one_source_gives_too_few_not_a_zero_width_ci(tmp_path):
    doc = run_arena(contests(1, "ab"), Judge({"a": 1.0, "b": 0.0}, seed=1, nu=0.0), tmp_path, n_boot=30)
    for r in doc["editors"]:
        # one decided verdict is also a separation: both are said
        assert r["ci"] is None and r["rank_ci"] is None and "too few sources (1)" in r["rating_note"]
        assert r["rating"] is None and "separation" in r["rating_note"]
    (nb,) = doc["neighbours"]
    assert nb["p_better"] is None and nb["significant"] is False and nb["why"] == "too few sources"
    text = "\n".join(arena_lines(doc))
    assert "too few sources" in text and "100%" not in text
    assert any(n.startswith("too few sources: a (1), b (1)") for n in doc["notes"])


# ------------------------------------------------------------------------------------------------ 12. unconnected

def test_editors_never_compared_are_ranked_within_their_group_only(tmp_path):
    strengths = {"a": 1.0, "b": -1.0, "c": 3.0, "d": 2.0}
    # sources 0-19 edited by a and b only, 20-39 by c and d only: nothing links {a, b} with {c, d}
    cs = contests(40, None, per_source=lambda k: "ab" if k < 20 else "cd")
    doc = run_arena(cs, Judge(strengths, seed=3, nu=0.2), tmp_path, n_boot=50)
    assert doc["groups"] == [["a", "b"], ["c", "d"]]
    rows = {r["editor"]: r for r in doc["editors"]}
    assert (rows["a"]["rank"], rows["b"]["rank"], rows["c"]["rank"], rows["d"]["rank"]) == (1, 2, 1, 2)
    assert (rows["a"]["group"], rows["c"]["group"]) == (1, 2)
    assert {(n["better"], n["worse"]) for n in doc["neighbours"]} == {("a", "b"), ("c", "d")}  # none across groups
    note = next(n for n in doc["notes"] if n.startswith("the comparisons fall into unconnected groups"))
    assert "group 1: a, b; group 2: c, d" in note
    assert doc["schedule"]["stopped"] != "settled" and not doc["schedule"]["settled"]  # the groups' order is unknown
    assert any(u.get("unlinked") for u in doc["schedule"]["unsettled"])
    assert "(unconnected groups: no order)" in "\n".join(arena_lines(doc))
    boot = bootstrap_ratings([(g, 0, 1, 1) for g in range(6)] + [(g + 6, 2, 3, 1 if g % 3 else -1) for g in range(6)], 4,
                             n_boot=20)
    assert boot["p_better"][0][2] is None and boot["p_better"][1][3] is None
    assert boot["rank_ci"][2][0] == 1  # ranks count the editors of its own group only
    # the meta-evaluation refuses one ranking over unconnected groups
    human = tmp_path / "human.json"
    human.write_text(json.dumps(["c", "d", "a", "b"]))
    res = runner.invoke(app, ["meta-eval", "arena", str(tmp_path), "--human-ranking", str(human)])
    assert res.exit_code == 2 and "unconnected groups" in res.output


# ------------------------------------------------------------------------------------------------ 13. all ties, no verdict

def test_all_ties_leave_no_order_and_no_significance_from_noise():
    comps = [(g, i, j, 0) for g in range(30) for i in range(5) for j in range(i + 1, 5)]
    boot = bootstrap_ratings(comps, 5, n_boot=40)
    assert boot["rank_ci"] == [None] * 5 and boot["nu"] is None
    assert all(p is None for row in boot["p_better"] for p in row)


def test_no_parsable_verdict_rates_nothing_and_exits_non_zero(tmp_path):
    from editlens.runner.arena import ratings_document

    table = {("a", "b"): None, ("a", "c"): None, ("b", "c"): None}
    doc = run_arena(contests(6, "abc"), Judge(table=table), tmp_path, n_boot=20)
    assert all(r["rating"] is None and r["rank"] is None and r["ci"] is None for r in doc["editors"])
    assert doc["notes"][0].startswith("no comparison gave a verdict") and doc["tie_parameter"] is None
    assert ratings_document(["a", "b"], [], [], ties="davidson", n_boot=10, seed=0)["editors"][0]["rating"] is None


def test_cli_with_no_verdict_exits_3(tmp_path, monkeypatch):
    rows = [{"id": f"{m}{k}", "source": f"s{k}.png", "edited": f"{m}{k}.png", "instruction": "x", "model": m}
            for k in range(3) for m in "ab"]
    man = tmp_path / "m.jsonl"
    man.write_text("".join(json.dumps(r) + "\n" for r in rows))

    class Unparsable:  # a comparer whose every answer is unparsable (kept raw, never a verdict)
        name = "unparsable"

        def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
            pass

        def identity(self) -> dict:
            return {"u": 1}

        def compare(self, items, batch_size=8):  # type: ignore[no-untyped-def]
            return [{"id": it.id, "verdict": None, "label": None, "reason": "unparsable", "raw": "?"} for it in items]

    monkeypatch.setattr("editlens.runner.compare.ScoreComparer", Unparsable)
    res = runner.invoke(app, ["arena", str(man), "--metric", "l1_ref", "--out", str(tmp_path / "o")])
    assert res.exit_code == 3, res.output
    assert "no comparison gave a verdict" in res.output and "nothing is rated" in res.output


# ------------------------------------------------------------------------------------------------ 14. settled

def _neighbour_doubt(path, editors, stop_at):  # type: ignore[no-untyped-def]
    """From the written comparisons alone: each neighbour's probability of the wrong order."""
    idx = {m: i for i, m in enumerate(editors)}
    comps = []
    for line in (path / "comparisons.jsonl").read_text().splitlines():
        c = json.loads(line)
        if c.get("label") is not None:
            comps.append((c["source"], idx[c["a"]], idx[c["b"]], int(c["label"])))
    w, t = pair_counts(comps, len(editors))
    theta = fit(comps, len(editors))["theta"]
    return unsettled_neighbours(theta, order_uncertainty(w, t, theta), stop_at), theta


def test_settled_only_when_every_neighbours_order_is_settled(tmp_path):
    """6 editors x 60 sources, as the report's reproduction: "settled" only with every neighbour's
    wrong-order probability under --stop-at (recomputed from comparisons.jsonl), and then the order is
    the true one; close editors that 60 sources cannot separate are reported as not settled."""
    editors = [f"e{k}" for k in range(6)]
    spread = dict(zip(editors, [3.0, 1.8, 0.6, -0.6, -1.8, -3.0]))
    close = dict(zip(editors, [0.06, 0.04, 0.02, 0.0, -0.02, -0.04]))  # no 60 sources settle these
    settled = unsettled = 0
    for seed in range(4):
        for name, strengths in (("spread", spread), ("close", close)):
            out = tmp_path / f"{name}{seed}"
            doc = run_arena(contests(60, editors), Judge(strengths, seed=seed), out, seed=seed, n_boot=20)
            s = doc["schedule"]
            doubt, theta = _neighbour_doubt(out, sorted(editors), s["stop_at"])
            if s["stopped"] == "settled":
                settled += 1
                assert doubt == [] and s["settled"] and s["unsettled"] == []
                assert [r["editor"] for r in doc["editors"]] == editors  # the true order
            else:
                unsettled += 1
                assert s["stopped"] in ("exhausted", "budget") and not s["settled"]
                assert doubt and max(p for p, _, _ in doubt) >= s["stop_at"]
                assert {(u["better"], u["worse"]) for u in s["unsettled"]} == {(sorted(editors)[i], sorted(editors)[j])
                                                                            for _, i, j in doubt}
                assert "not settled:" in "\n".join(arena_lines(doc))
            if name == "close":
                assert s["stopped"] != "settled"
    assert settled >= 3 and unsettled >= 4


def test_a_pair_judged_on_every_source_is_settled_through_third_editors(tmp_path):
    # a and b are close and share only 3 sources; c, d share all 40 sources with each of them
    strengths = {"a": 0.8, "b": 0.0, "c": 2.5, "d": -2.0}

    def who(k: int) -> str:
        return "abcd" if k < 3 else "acd" if k % 2 else "bcd"

    doc = run_arena(contests(40, None, per_source=who), Judge(strengths, seed=5, nu=0.1), tmp_path, seed=5,
                    n_boot=20, stop_at=0.05)
    judged = [json.loads(x) for x in (tmp_path / "comparisons.jsonl").read_text().splitlines()]
    ab = sum(1 for c in judged if {c["a"], c["b"]} == {"a", "b"})
    via = sum(1 for c in judged if {c["a"], c["b"]} & {"a", "b"} and {c["a"], c["b"]} & {"c", "d"})
    assert ab <= 3 and via > 6  # the (a, b) pool ran out: more comparisons went through c and d
    order = [r["editor"] for r in doc["editors"]]
    assert doc["schedule"]["stopped"] != "settled" or order.index("a") < order.index("b")


# ------------------------------------------------------------------------------------------------ budget

def test_a_budget_below_the_first_round_samples_it_at_random_by_the_seed(tmp_path):
    cs = contests(20, "abcd")  # the first round: 2 pairs per source, 40 in all

    def sources(seed: int, where: str) -> set:  # type: ignore[no-untyped-def]
        run_arena(cs, Judge({"a": 1, "b": 0, "c": 0, "d": -1}, seed=0), tmp_path / where, budget=6, seed=seed,
                  n_boot=10)
        return {json.loads(x)["source"] for x in (tmp_path / where / "comparisons.jsonl").read_text().splitlines()}

    first = sources(0, "one")
    assert first != {"s0", "s1", "s2"} and len(first) >= 4  # not the head of the manifest
    assert sources(0, "again") == first and sources(1, "other") != first


# ------------------------------------------------------------------------------------------------ 15. human ranking, nu

@pytest.mark.parametrize(("text", "needle"), [
    ('{"a": NaN, "b": 1}', "the human score of 'a' is 'NaN'"),
    ('{"a": Infinity, "b": 1}', "finite number"),
    ('{"a": 1, "a": 2, "b": 0}', "editor a named twice"),
    ('["a", "b", "a"]', "editor a listed twice"),
    ('{"a": "high", "b": 1}', "finite number"),
    ('{"a": true, "b": 1}', "finite number"),
    ('["a"]', "at least two editors"),
])
def test_a_human_ranking_is_refused_naming_the_problem(tmp_path, text, needle):
    p = tmp_path / "h.json"
    p.write_text(text)
    with pytest.raises(InputError, match=needle.replace("(", r"\(")):
        read_human_ranking(p)


def test_two_editors_give_no_rank_correlation_and_unknown_editors_are_said(tmp_path):
    assert rank_agreement({"a": 1, "b": 0}, {"a": 0, "b": 1})["kendall"] is None
    doc = run_arena(contests(12, "abc"), Judge({"a": 1, "b": 0, "c": -1}, seed=2), tmp_path, n_boot=20,
                    human={"a": 3.0, "b": 2.0, "zed": 1.0})
    h = doc["human"]
    assert h["kendall"] is None and h["n"] == 2 and h["not_in_arena"] == ["zed"] and "too few editors" in h["why"]
    text = "\n".join(arena_lines(doc))
    assert "Kendall τ undefined" in text and "not in the arena (left out): zed" in text


def test_nu_is_given_only_when_fitted(tmp_path):
    decided_only = [(g, 0, 1, 1 if g % 3 else -1) for g in range(20)]
    assert bootstrap_ratings(decided_only, 2, n_boot=10)["nu"] is None
    mixed = decided_only + [(g, 0, 1, 0) for g in range(20, 30)]
    assert 0 < bootstrap_ratings(mixed, 2, n_boot=10)["nu"] < 5
    doc = run_arena(contests(10, "ab"), Judge({"a": 1, "b": 0}, seed=0, nu=0.0), tmp_path, n_boot=10)
    assert doc["tie_parameter"] is None and "nu = " not in "\n".join(arena_lines(doc))
    assert "nu fitted (here not fitted: see the notes)" in "\n".join(arena_lines(doc))
    assert any("nu is not fitted: no verdict was a tie" in n for n in doc["notes"])


def test_a_manifest_with_one_editor_says_so(tmp_path):
    from editlens.runner.arena import contests_from

    rows = [{"id": f"x{k}", "source": f"s{k}.png", "edited": f"e{k}.png", "instruction": "x", "model": "solo"}
            for k in range(3)]
    man = tmp_path / "m.jsonl"
    man.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"the manifest has 1 editor\(s\) \(solo\) on 3 source\(s\)"):
        contests_from(man)
