"""What people label and who labels what: items (pairs of one source, multi-turn sessions), the plan (overlap
k, hidden repeats, gold items, seeded), and the `editlens annotate` command's checks, resume and status."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from editlens.annotate import plan as P
from editlens.annotate.task import Task, annotator_names
from editlens.cli.main import app
from editlens.errors import InputError
from editlens.testing.annotate_data import make_edit_set


@pytest.fixture(scope="module")
def edits(tmp_path_factory):
    return make_edit_set(tmp_path_factory.mktemp("edits"), sources=4, editors=4, size=16)  # 16 edits, 24 pairs


def test_pairs_are_two_editors_on_one_source(edits):
    rows, info = P.read_edits(edits)
    items = P.pairwise_items(rows)
    assert len(items) == 24 and info["run"] is None
    for it in items:
        assert it["a"]["editor"] != it["b"]["editor"] and it["a"]["source"] == it["b"]["source"] == it["source"]
        assert it["id"] == f"{it['group']}|{it['a']['editor']}|{it['b']['editor']}"
    # the orientation (which edit is A) is not the editors' alphabetical order everywhere
    assert len({it["a"]["editor"] < it["b"]["editor"] for it in items}) == 2
    assert [it["id"] for it in P.pairwise_items(rows)] == [it["id"] for it in items]  # and it is fixed


def test_plan_overlap_repeats_gold(edits):
    items = P.pointwise_items(P.read_edits(edits)[0])
    names = ["a", "b", "c"]
    gold = [items[0]["id"], items[1]["id"]]
    rows = P.make_plan(items, names, overlap=2, seed=3, repeats=3, gold=gold)
    assert rows == P.make_plan(items, names, overlap=2, seed=3, repeats=3, gold=gold)  # the seed decides
    assert rows != P.make_plan(items, names, overlap=2, seed=4, repeats=3, gold=gold)
    seen = Counter(r[2] for r in rows if r[3] == "item")
    assert set(seen) == {it["id"] for it in items} - set(gold) and set(seen.values()) == {2}  # k = 2
    per = Counter(r[0] for r in rows if r[3] == "item")
    assert max(per.values()) - min(per.values()) <= 1  # balanced
    for a in names:
        mine = sorted((r for r in rows if r[0] == a), key=lambda r: r[1])
        assert [r[1] for r in mine] == list(range(len(mine)))
        assert sorted(r[2] for r in mine if r[3] == "gold") == sorted(gold)
        reps = [r for r in mine if r[3] == "repeat"]
        assert len(reps) == 3
        for r in reps:
            first = mine[r[5]]
            assert first[2] == r[2] and first[3] == "item" and r[1] - first[1] >= 4


def test_every_pair_of_annotators_shares_items(edits):
    """Cohen's kappa needs shared items for every pair of people: with 4 annotators and k = 2, none is disjoint."""
    from itertools import combinations

    items = P.pairwise_items(P.read_edits(edits)[0])
    rows = P.make_plan(items, ["a", "b", "c", "d"], overlap=2, seed=0)
    mine = {a: {r[2] for r in rows if r[0] == a} for a in "abcd"}
    assert all(mine[x] & mine[y] for x, y in combinations("abcd", 2))
    assert sorted(len(v) for v in mine.values()) == [12, 12, 12, 12]


def test_repeated_pairs_come_back_swapped(edits):
    items = P.pairwise_items(P.read_edits(edits)[0])
    by_id = {it["id"]: it for it in items}
    rows = P.make_plan(items, ["a"], overlap=1, seed=0, repeats=5)
    lefts = Counter()
    for r in rows:
        it = by_id[r[2]]
        assert r[4] in (it["a"]["id"], it["b"]["id"])
        lefts[r[4] == it["a"]["id"]] += 1
        if r[3] == "repeat":
            assert rows[r[5]][4] != r[4]
    assert lefts[True] > 3 and lefts[False] > 3  # sides drawn, not fixed


def test_sessions_turn_by_turn(tmp_path):
    m = make_edit_set(tmp_path / "e", sources=2, editors=2, turns=3, size=16)
    rows, _ = P.read_edits(m)
    pw = {it["id"]: it for it in P.pointwise_items(rows)}
    third = pw["s0/e1/t3"]
    assert third["turn"] == 3 and [h["turn"] for h in third["history"]] == [1, 2]
    assert third["source"] == pw["s0/e1/t2"]["edited"]  # a turn edits the editor's own last output
    pairs = P.pairwise_items(rows)
    assert len(pairs) == 6 and {p["group"] for p in pairs} == {f"s{s}#t{t}" for s in range(2) for t in (1, 2, 3)}
    p3 = next(p for p in pairs if p["group"] == "s1#t3")
    assert p3["source"].endswith("src1.png") and [h["turn"] for h in p3["history"]] == [1, 2]
    t = Task.create(tmp_path / "t", m, "pairwise", annotators=["x"], seed=0)
    try:
        row = next(r for r in t.store.assignments() if t.items[r["item"]]["group"] == "s1#t3")
        shown = t.page_item(row, lambda p: p)
        first_left = shown["history"][0]["left"]
        left_editor = "e0" if row["left"].endswith("e0/t3") else "e1"
        assert f"ed{left_editor[-1]}_t0" in first_left and shown["turn"] == 3
    finally:
        t.close()


def test_bad_inputs_are_clear(edits, tmp_path):
    with pytest.raises(InputError, match="overlap 3"):
        Task.create(tmp_path / "t1", edits, "pairwise", annotators=["a", "b"], overlap=3)
    with pytest.raises(InputError, match="preset"):
        Task.create(tmp_path / "t2", edits, "pointwise", annotators=["a"], preset="stars")
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"a": "s0/e0", "b": "s1/e1", "preference": "A"}) + "\n")
    with pytest.raises(InputError, match="gold.jsonl:1.*not a pair"):
        Task.create(tmp_path / "t3", edits, "pairwise", annotators=["a"], gold=gold)
    gold.write_text(json.dumps({"id": "s0/e0", "scores": {"SC": 2, "PQ": 1}}) + "\n")
    with pytest.raises(InputError, match="not on its scale"):
        Task.create(tmp_path / "t4", edits, "pointwise", annotators=["a"], gold=gold)
    with pytest.raises(InputError, match="twice"):
        annotator_names("a,b,a")
    assert annotator_names("3") == ["annotator1", "annotator2", "annotator3"]
    single = tmp_path / "one.jsonl"
    single.write_text(json.dumps({"id": "x", "source": str(edits.parent / "img/src0.png"),
                                  "edited": str(edits.parent / "img/src0_ed0_t0.png"), "instruction": "i", "model": "m"}) + "\n")
    with pytest.raises(InputError, match="two editors"):
        Task.create(tmp_path / "t5", single, "pairwise", annotators=["a"])


def test_cli_plan_resume_and_status(edits, tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "s0/e0", "scores": {"overall": 5}}) + "\n")
    r = CliRunner().invoke(app, ["annotate", str(edits), "--task", "pointwise", "--preset", "likert", "--out",
                                 str(tmp_path / "t"), "--annotators", "ann,bea", "--overlap", "2", "--repeats", "2",
                                 "--gold", str(gold), "--plan-only"])
    assert r.exit_code == 0, r.output
    links = dict(line.split("\t") for line in (tmp_path / "t" / "links.txt").read_text().splitlines())
    assert set(links) == {"ann", "bea"} and all("?token=" in u for u in links.values())
    plan = json.load(open(tmp_path / "t" / "plan.json"))
    assert plan["settings"]["seed"] == 0 and plan["per_annotator"]["ann"] == {"item": 15, "repeat": 2, "gold": 1}
    t = Task(tmp_path / "t")
    t.vote("ann", t.current("ann")["position"], {"scores": {"overall": 4}})
    t.close()
    # resumed: no source needed, the same tokens and (free again) the same port
    r = CliRunner().invoke(app, ["annotate", "serve", "--out", str(tmp_path / "t"), "--plan-only"])
    assert r.exit_code == 0, r.output
    assert f"ann: 1/18 done  {links['ann']}" in r.output
    r = CliRunner().invoke(app, ["annotate", "status", str(tmp_path / "t")])
    assert "ann" in r.output and "1 of    18" in r.output
    r = CliRunner().invoke(app, ["annotate", str(edits), "--out", str(tmp_path / "new")])
    assert r.exit_code == 2 and "--task" in r.output
    r = CliRunner().invoke(app, ["annotate", "serve", "--out", str(tmp_path / "none")])
    assert r.exit_code == 2 and "holds no task" in r.output


def test_a_run_directory_is_read_through_its_manifest(tmp_path):
    m = make_edit_set(tmp_path / "e", sources=2, editors=3, size=16)
    r = CliRunner().invoke(app, ["run", str(m), "--out", str(tmp_path / "run"), "--metrics", "l1"])
    assert r.exit_code == 0, r.output
    t = Task.create(tmp_path / "t", tmp_path / "run", "pointwise", annotators=["a"], preset="likert")
    try:
        assert t.settings["run"] == str(tmp_path / "run") and t.settings["manifest"] == str(m)
        assert sorted(t.items) == sorted(f"s{s}/e{e}" for s in range(2) for e in range(3))
    finally:
        t.close()
