"""The three human-label benchmarks of edit reward models, read from small
files written exactly in their published formats, their protocols on known
scores, and pairwise judging in both presentation orders."""

from __future__ import annotations

import json

import pytest
from helpers import rng_image
from scripted import ScriptedBackend

from editlens.backends.types import Generation
from editlens.bench.aurora import verdicts_report
from editlens.bench.editreward_bench import editreward_bench_report
from editlens.bench.editscore_bench import editscore_bench_report
from editlens.bench.evaluate import load_benchmark, prepare
from editlens.bench.mmrb2 import mmrb2_report
from editlens.errors import InputError
from editlens.judges.pairwise import PairVerdict, PairwiseJudge, consistency
from editlens.testing import tiny_benchmarks as TB


def _scored(values):
    return {k: {"status": "scored", "value": v, "details": {}} for k, v in values.items()}


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_editscore_bench_published_format_and_protocol(tmp_path, fmt):
    bench = load_benchmark("editscore-bench", TB.write_editscore_bench(tmp_path / "b", fmt))
    assert len(bench.pairs) == 12 and len(bench.edits) == 8  # 2 tasks x 2 pairs x 3 dimensions; edits shared
    assert bench.pairs[0].a == "subject-add_0_m0" and bench.pairs[0].label == 1  # index 0 is the preferred edit
    # overall: m0 wins except in one color_alter pair (a tie: wrong); prompt following read from the details
    values = {k: (1.0 if k.endswith("m0") else 0.0) for k in bench.edits}
    values["color_alter_1_m1"] = 1.0
    results = _scored(values)
    for k in results:
        results[k]["details"] = {"prompt_following": 0.0 if k.endswith("m0") else 1.0}
    results.pop("subject-add_1_m1")  # an edit without a score
    rep = editscore_bench_report(bench, results, "m")
    o = rep["dimensions"]["overall"]
    assert o["per_task"] == {"subject-add": 1.0, "color_alter": 0.5}
    assert o["per_task_unscored_as_wrong"] == {"subject-add": 0.5, "color_alter": 0.5}
    assert o["average"] == pytest.approx(0.75) and o["groups"]["object"] == 1.0 and o["groups"]["scene"] is None
    pf = rep["dimensions"]["prompt_following"]
    assert pf["average"] == 0.0 and pf["score_field"] == {"details.prompt_following": 4}
    assert rep["n_unscored_pairs"] == 3 and rep["value"] == pytest.approx(0.75)


def test_editscore_bench_bad_files_name_file_and_field(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "x.parquet"
    pq.write_table(pa.table({"key": [["a", "b"]], "instruction": ["x"]}), f)
    with pytest.raises(InputError, match=r"x.parquet: missing column\(s\) \['input_image'"):
        load_benchmark("editscore-bench", f)
    pq.write_table(pa.table({"key": [["a"]], "instruction": ["x"], "input_image": [None], "output_images": [None],
                             "task_type": ["t"], "dimension": ["overall"]}), f)
    with pytest.raises(InputError, match="row 0: 'key' must be a list of two edit ids"):
        load_benchmark("editscore-bench", f)
    with pytest.raises(InputError, match="no such file"):
        load_benchmark("editscore-bench", tmp_path / "nope")


def test_editreward_bench_rankings_groups_and_protocol(tmp_path):
    bench = load_benchmark("editreward-bench", TB.write_editreward_bench(tmp_path / "b"))
    assert bench.info["groups"] == 5 and len(bench.pairs) == 3 + 3 + 6
    labels = {p.id: p.label for p in bench.pairs}
    assert labels["2pair/g2a"] == 1 and labels["2pair/g2b"] == -1 and labels["2pair/g2c"] == 0
    assert labels["3pair/g3a_1"] == -1  # AvsC ranked C>A: candidate 2 preferred
    # scores in the people's order everywhere, except g4a's C and D swapped
    order = {"g2a": "AB", "g2b": "BA", "g2c": "AB", "g3a": "CAB", "g4a": "BADC"}
    scores = {}
    for e in bench.edits:
        subset, group, letter = e.split("/")
        scores[e] = 10.0 - order[group].index(letter)
    scores["2pair/g2c/A"] = scores["2pair/g2c/B"] = 5.0  # the human tie: equal scores
    scores["4pair/g4a/C"], scores["4pair/g4a/D"] = scores["4pair/g4a/D"], scores["4pair/g4a/C"]
    rep = editreward_bench_report(bench, scores, "m")
    assert rep["by_k"]["2pair"]["pairwise"]["accuracy"] == 1.0
    assert rep["by_k"]["3pair"]["strict"]["accuracy"] == 1.0
    assert rep["by_k"]["4pair"]["pairwise"]["accuracy"] == pytest.approx(5 / 6)  # C/(C+D)
    assert rep["by_k"]["4pair"]["strict"]["accuracy"] == 0.0
    assert rep["strict_accuracy"] == pytest.approx(4 / 5) and rep["strict"]["groups"] == 5
    del scores["3pair/g3a/B"]
    rep = editreward_bench_report(bench, scores, "m")
    assert rep["strict"] == {"correct": 3, "groups": 4, "groups_with_unscored_edits": 1}


def test_editreward_bench_refuses_inconsistent_rows(tmp_path):
    import pyarrow.parquet as pq

    root = TB.write_editreward_bench(tmp_path / "b")
    f = root / "2pair" / "train-00000-of-00001.parquet"
    rows = pq.read_table(f).to_pylist()
    rows[0]["ranking"] = "C>D"
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(f)), f)
    with pytest.raises(InputError, match="ranking 'C>D' does not compare A and B"):
        load_benchmark("editreward-bench", root)


def test_mmrb2_edit_json_prepare_and_both_orders(tmp_path):
    path = TB.write_mmrb2(tmp_path / "mm")
    summary = prepare("mmrb2", path / "edit.json", tmp_path / "prep")
    assert summary["pairs"] == 3 and summary["info"]["left_out"] == {"several input images": 1}
    assert prepare("mmrb2", path, tmp_path / "prep2", multi_input="first")["pairs"] == 4
    rows = [json.loads(x) for x in (tmp_path / "prep" / "pairs.jsonl").read_text().splitlines()]
    assert rows[0]["preference"] == "A" and rows[1]["preference"] == "B" and rows[0]["a"].endswith("/a")
    bench = load_benchmark("mmrb2", tmp_path / "prep")
    ids = [p.id for p in bench.pairs]
    # a judge that prefers whatever it sees first: right in one order of each pair, consistent never
    biased = {i: {"verdict": "A=B", "orders": {"forward": {"verdict": "A>B"}, "reverse": {"verdict": "B>A"}}}
              for i in ids}
    rep = mmrb2_report(bench, verdicts=biased)
    assert rep["accuracy"] == 0.5 and rep["consistency"] == 0.0 and rep["judgements"] == 6
    assert (rep["accuracy_forward"], rep["accuracy_reverse"]) == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    # a scorer: one computation per edit, both orders alike
    scores = {p.a: 1.0 if p.label == 1 else 0.0 for p in bench.pairs} | {p.b: 0.5 for p in bench.pairs}
    rep = mmrb2_report(bench, scores=scores, metric="m")
    assert rep["accuracy"] == 1.0 and rep["consistency"] == 1.0 and rep["judgements"] == 6
    full = json.loads((tmp_path / "mm" / "edit.json").read_text())
    for p in full["pairs"]:
        del p["prompt_content"]
    (tmp_path / "ro.json").write_text(json.dumps(full))
    with pytest.raises(InputError, match="response_only"):
        load_benchmark("mmrb2", tmp_path / "ro.json")


def _judge(answer):
    j = PairwiseJudge(vlm="scripted")
    j._backend = ScriptedBackend(answer)
    return j


def test_both_orders_verdict_only_when_they_agree():
    a, b = rng_image(1), rng_image(2)

    def prefers_red_first(req):  # answers by content: A=rng_image(1) is better wherever it is shown
        parts = req.messages[0].parts
        first = parts[1]
        return "[[A>B]]" if first is not None and (first == a).all() else "[[B>A]]"

    (v,) = _judge(prefers_red_first).compare([(rng_image(0), a, b, "x")])
    assert v.verdict == "A>B" and v.consistent is True and v.orders["reverse"]["verdict"] == "A>B"
    (biased,) = _judge(lambda r: "[[A>B]]").compare([(rng_image(0), a, b, "x")])
    assert biased.verdict == "A=B" and biased.consistent is False and "position bias" in biased.reason
    assert biased.to_dict()["position_bias"] is True and biased.label == 0
    answers = iter(["[[A>B]]", "I cannot tell."])
    (half,) = _judge(lambda r: next(answers)).compare([(rng_image(0), a, b, "x")])
    assert half.verdict is None and "reverse" in half.reason and half.raw["reverse"] == "I cannot tell."
    one = PairwiseJudge(vlm="scripted", orders="forward")
    one._backend = ScriptedBackend(lambda r: "[[B>A]]")
    (f,) = one.compare([(rng_image(0), a, b, "x")])
    assert f.verdict == "B>A" and f.consistent is None and len(one._backend.requests) == 1
    c = consistency([v, biased, half])
    assert c["rate"] == 0.5 and c["position_bias"] == 1 and c["without_verdict"] == 1
    with pytest.raises(ValueError, match="orders must be one of"):
        PairwiseJudge(vlm="scripted", orders="sideways")


def test_pairwise_spec_declares_orders_and_runs_refuse_it():
    from editlens.metrics.registry import create_metric, get_spec
    from editlens.runner.selection import select_metrics

    spec = get_spec("pairwise")
    assert spec.pairwise and spec.orders == ("both", "forward", "reverse") and spec.defaults["orders"] == "both"
    assert create_metric("pairwise", vlm="x").orders == "both"
    with pytest.raises(InputError, match="use `editlens compare`"):
        select_metrics(["pairwise"], vlm={"vlm": "x"})


def test_verdicts_report_and_mmrb2_judgement_file(tmp_path):
    from editlens.runner.compare import mmrb2_judgements

    human = tmp_path / "h.jsonl"
    human.write_text("".join(json.dumps({"id": f"p{i}", "a": f"a{i}", "b": f"b{i}", "preference": pref}) + "\n"
                             for i, pref in enumerate(["A", "B", "tie", "A"])))
    verdicts = [
        {"id": "p0", "verdict": "A>B", "consistent": True, "orders": {"forward": {"verdict": "A>B"}, "reverse": {"verdict": "A>B"}}},
        {"id": "p1", "verdict": "A=B", "consistent": False, "orders": {"forward": {"verdict": "A>B"}, "reverse": {"verdict": "B>A"}}},
        {"id": "p2", "verdict": "A=B=Good", "consistent": True, "orders": {"forward": {"verdict": "A=B=Good"}, "reverse": {"verdict": "A=B=Good"}}},
        {"id": "p3", "verdict": None, "consistent": None, "orders": {"forward": {"verdict": "A>B"}, "reverse": {"verdict": None}}},
    ]
    vf = tmp_path / "v.jsonl"
    vf.write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    rep = verdicts_report(human, vf)
    assert rep["judgements"] == 7 and rep["accuracy"] == pytest.approx(6 / 7)
    assert rep["consistency"] == pytest.approx(2 / 3) and rep["n_no_verdict"] == 1
    assert rep["accuracy_of_reported_verdict"] == pytest.approx(2 / 3)  # p1's position-bias tie is wrong
    mm = mmrb2_judgements(verdicts, "judge")
    assert mm["p1"]["forward"][0]["judgement"] == "A" and mm["p1"]["reverse"][0]["judgement"] == "A"  # as shown
    assert "reverse" not in mm["p3"] and mm["p2"]["forward"][0]["judgement"] == "tie"


def test_scripted_generation_problem_reasons_survive():
    g = Generation(None, error="boom")
    (v,) = _judge(lambda r: g).compare([(rng_image(0), rng_image(1), rng_image(2), "x")])
    assert v.verdict is None and "backend error" in v.reason
    assert isinstance(v, PairVerdict)
