"""Meta-evaluation protocols, hand-computed on small data, and the published ImagenHub figure."""

import json
import math

import numpy as np
import pytest
from helpers import shared_path
from scipy import stats

from editlens.bench.aurora import pairwise_report, pointwise_report
from editlens.bench.imagenhub import imagenhub_report, load_imagenhub_human, load_viescore_outputs
from editlens.meta.correlation import correlate, icc_2_1, system_level
from editlens.meta.protocols import (
    accuracy_with_ties,
    aggregate_correlations,
    aurora_pointwise,
    genai_bench_accuracy,
    genai_verdict,
    imagenhub_correlation,
    parse_score_list,
    ranks_from_similarity,
    retrieval_metrics,
    viescore_overall,
)


def test_aggregations_hand_computed():
    rs = [0.5, 0.1, float("nan")]  # NaN (undefined) groups are left out
    assert aggregate_correlations(rs, "mean") == pytest.approx(0.3)
    assert aggregate_correlations(rs, "official") == pytest.approx(math.tanh(0.3))
    assert aggregate_correlations(rs, "fisher") == pytest.approx(math.tanh((math.atanh(0.5) + math.atanh(0.1)) / 2))


def test_grouped_spearman_with_ties_and_missing_items():
    human = {"M1": {"a": 1, "b": 2, "c": 3, "d": 3}, "M2": {"a": 0, "b": 1, "c": 1}}
    pred = {"M1": {"a": 0.1, "b": 0.2, "c": 0.2, "d": 0.9}, "M2": {"a": 0.5, "b": 0.4}}  # M2 misses c
    r = imagenhub_correlation(pred, human, "mean")
    r1 = stats.spearmanr([0.1, 0.2, 0.2, 0.9], [1, 2, 3, 3])[0]
    r2 = -1.0  # a,b: pred down, human up
    assert r.per_group == {"M1": pytest.approx(r1), "M2": pytest.approx(r2)}
    assert r.n_per_group == {"M1": 4, "M2": 2}
    assert r.value == pytest.approx((r1 + r2) / 2)


def test_constant_group_excluded_not_zero():
    human = {"M": {"a": 1, "b": 1, "c": 1}}
    pred = {"M": {"a": 0.1, "b": 0.2, "c": 0.3}}
    r = aurora_pointwise(pred, human)
    assert math.isnan(r["value"]) and math.isnan(r["per_model_mean"]["value"])
    assert "constant" in r["per_model_mean"]["excluded_groups"]["M"]


def test_aurora_pointwise_is_one_spearman_over_all_items_with_the_per_model_mean_beside_it():
    # each model ranks its own items perfectly, but model B's scores are all lower while people rate
    # its edits higher: the per-model mean says 1.0, the pooled Spearman (the release) sees the offset
    pred = {"A": {"a1": 0.7, "a2": 0.8, "a3": 0.9}, "B": {"b1": 0.1, "b2": 0.2, "b3": 0.3}}
    human = {"A": {"a1": 1, "a2": 2, "a3": 3}, "B": {"b1": 4, "b2": 5, "b3": 6}}
    r = aurora_pointwise(pred, human)
    assert r["per_model_mean"]["value"] == pytest.approx(1.0)
    assert r["value"] == pytest.approx(stats.spearmanr([0.7, 0.8, 0.9, 0.1, 0.2, 0.3], [1, 2, 3, 4, 5, 6])[0])
    assert r["value"] == pytest.approx(-0.5429, abs=1e-4) and r["n_items"] == 6
    # a constant group: left out of the per-model mean, its items still count in the pooled figure
    human["C"], pred["C"] = {"c1": 2, "c2": 2}, {"c1": 0.5, "c2": 0.6}
    r = aurora_pointwise(pred, human)
    assert r["n_items"] == 8 and r["per_model_mean"]["n_items"] == 6


@pytest.mark.parametrize("raw,expected", [
    ([0, 10], [0.0, 10.0]), ("[0, 10]", [0.0, 10.0]), ("[7,8]", [7.0, 8.0]),
    ("Scores: [3, 4] overall", [3.0, 4.0]), ('{"score": [5, 6]}', [5.0, 6.0]), ("(2, 9)", [2.0, 9.0]),
    ("I cannot rate this", None), ("", None), (None, None), ([], None), (["x"], None),
])
def test_parse_score_list(raw, expected):
    assert parse_score_list(raw) == expected


def test_viescore_overall():
    assert viescore_overall([4, 8], "[10, 6]") == (0.4, 0.6, pytest.approx(math.sqrt(0.24)))
    assert viescore_overall([12, 15], [10]) == (1.0, 1.0, 1.0)  # clipped
    assert viescore_overall("garbled", [10]) is None


def test_genai_verdict_and_accuracy():
    assert genai_verdict("blah\nthe answer is [[A>B]] not [[B>A]]\n[[A=B]]") == "[[A>B]]"
    assert genai_verdict("no verdict here") is None
    items = [
        {"idx": 0, "response": "[[A>>B]]", "human_vote": "leftvote"},
        {"idx": 1, "response": "[[B>A]]", "human_vote": "leftvote"},
        {"idx": 2, "response": "x\n[[A=B]]", "human_vote": "bothbad_vote"},
        {"idx": 3, "response": "[[A=B]]", "human_vote": "tievote"},
        {"idx": 4, "response": "[[A=B=Bad]]", "human_vote": "tievote"},
        {"idx": 5, "response": "I refuse", "human_vote": "rightvote"},
        {"idx": 6, "response": "[[B>>A]]", "human_vote": "rightvote"},
    ]
    r = genai_bench_accuracy(items)
    assert r["accuracy"] == pytest.approx(4 / 7) and r["no_verdict"] == 1 and r["n"] == 7
    with pytest.raises(ValueError, match="human_vote"):
        genai_bench_accuracy([{"idx": 0, "response": "", "human_vote": "left"}])


def test_accuracy_with_ties_hand_computed():
    human = [1, 1, -1, 0, 0, -1]
    signal = [0.9, 0.05, -0.5, 0.02, -0.3, 0.1]
    # eps=0:    right: 0.9, 0.05, -0.5                         -> 3/6
    # eps=0.02: + the 0.02 tie                                  -> 4/6
    # eps=0.05: 0.05 becomes a (wrong) tie                      -> 3/6
    # eps=0.3:  ties 0.02, -0.3 right; 0.05, 0.1 wrong; 0.9, -0.5 -> 4/6
    # eps=0.5:  -0.5 becomes a (wrong) tie                      -> 3/6
    r = accuracy_with_ties(human, signal)
    assert r["accuracy"] == pytest.approx(4 / 6) and r["threshold"] == pytest.approx(0.02)  # smallest best eps
    assert r["accuracy_at_zero"] == pytest.approx(3 / 6)


def test_icc_shrout_fleiss_example():
    # Shrout & Fleiss (1979), Table 2: 6 targets x 4 judges; ICC(2,1) = 0.29
    x = [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]]
    assert icc_2_1(x) == pytest.approx(0.29, abs=0.005)


def test_retrieval_and_ranks():
    sim = np.array([[0.9, 0.1, 0.2], [0.8, 0.5, 0.1], [0.3, 0.3, 0.3]])
    ranks = ranks_from_similarity(sim)
    assert ranks.tolist() == [1, 2, 3]  # ties count against the query
    r = retrieval_metrics(ranks, ks=(1, 2))
    assert r["recall@1"] == pytest.approx(1 / 3) and r["recall@2"] == pytest.approx(2 / 3)
    assert r["mean_rank"] == 2.0 and r["median_rank"] == 2.0


def test_correlate_bootstrap_is_seeded():
    rng = np.random.default_rng(0)
    x = rng.random(50)
    y = x + rng.normal(0, 0.3, 50)
    a, b = correlate(x, y, "pearson", n_boot=200, seed=1), correlate(x, y, "pearson", n_boot=200, seed=1)
    assert a.ci == b.ci and a.ci[0] < a.value < a.ci[1]
    assert a.value == pytest.approx(stats.pearsonr(x, y)[0])


def test_system_level_kendall():
    r = system_level({"A": [1, 2], "B": [3], "C": [0]}, {"A": [0.5], "B": [0.9], "C": [0.1]})
    assert r["kendall_tau"] == pytest.approx(1.0)


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pointwise_and_pairwise_reports_with_unscored(tmp_path):
    human = _write_jsonl(tmp_path / "h.jsonl", [
        {"id": f"{m}/{i}", "model": m, "human": h} for m, hs in (("A", [0, 1, 2, 2]), ("B", [2, 1, 0, 1]))
        for i, h in enumerate(hs)])
    results = [{"id": f"A/{i}", "model": "A", "scores": {"j": {"value": v, "status": "scored"}}}
               for i, v in enumerate([0.1, 0.5, 0.7, 0.9])]
    results += [{"id": f"B/{i}", "model": "B", "scores": {"j": {"value": v, "status": "scored"}}}
                for i, v in enumerate([0.8, 0.6, 0.2])]
    results.append({"id": "B/3", "model": "B", "scores": {"j": {"value": None, "status": "unscored"}}})
    preds = _write_jsonl(tmp_path / "p.jsonl", results)
    rep = pointwise_report(human, preds, metric="j", n_boot=50)
    rA = stats.spearmanr([0.1, 0.5, 0.7, 0.9], [0, 1, 2, 2])[0]
    pooled = stats.spearmanr([0.1, 0.5, 0.7, 0.9, 0.8, 0.6, 0.2], [0, 1, 2, 2, 2, 1, 0])[0]
    assert rep["value"] == pytest.approx(pooled) and rep["protocol"] == "aurora-pointwise"
    assert rep["figures"]["per_model_mean_spearman"]["value"] == pytest.approx((rA + 1.0) / 2)  # B ranks alike
    assert rep["n_items"] == 7 and rep["n_unparsable"] == 1
    per_model = pointwise_report(human, preds, metric="j", n_boot=50, protocol="aurora-per-model")
    assert per_model["value"] == pytest.approx((rA + 1.0) / 2) and per_model["n_items"] == 7
    pairs = _write_jsonl(tmp_path / "pairs.jsonl", [
        {"id": "p1", "a": "A/3", "b": "A/0", "preference": "A"},
        {"id": "p2", "a": "B/0", "b": "A/0", "preference": "B"},
        {"id": "p3", "a": "A/1", "b": "B/3", "preference": "tie"},
    ])
    pr = pairwise_report(pairs, preds, metric="j")
    assert pr["n"] == 2 and pr["n_unparsable"] == 1 and pr["accuracy"] == pytest.approx(0.5)


def test_counts_are_the_items_a_figure_really_counts_and_all_unscored_says_so(tmp_path):
    from editlens.errors import InputError

    human = _write_jsonl(tmp_path / "h.jsonl", [{"id": f"{m}/{i}", "model": m, "human": h}
                                                for m, hs in (("A", [0, 1, 2]), ("B", [1, 1, 1])) for i, h in enumerate(hs)])
    preds = _write_jsonl(tmp_path / "p.jsonl", [{"id": f"{m}/{i}", "model": m, "score": v}
                                                for m in "AB" for i, v in enumerate([0.1, 0.5, 0.9])])
    rep = pointwise_report(human, preds, n_boot=20, protocol="mean")
    assert rep["n_items"] == 3 and rep["n_matched"] == 6  # B's constant human scores cannot count
    unscored = _write_jsonl(tmp_path / "u.jsonl", [{"id": f"A/{i}", "model": "A", "scores": {"j": {"value": None,
                                                    "status": "unscored"}}} for i in range(3)])
    with pytest.raises(InputError, match="nothing was scored: all 3 predictions are unscored or failed"):
        pointwise_report(human, unscored, metric="j", n_boot=20)
    pairs = _write_jsonl(tmp_path / "pairs.jsonl", [{"id": "p", "a": "A/0", "b": "A/1", "preference": "A"}])
    with pytest.raises(InputError, match="nothing was scored"):
        pairwise_report(pairs, unscored, metric="j")


def test_imagenhub_human_o_matches_samples_file():
    root = shared_path("benchmarks", "imagenhub_tie")
    human = load_imagenhub_human(root / "human_ratings")
    for line in list(open(root / "samples.jsonl"))[:200]:
        row = json.loads(line)
        assert human.scores["O"][row["method"]][row["uid"]] == pytest.approx(row["human_O"])
    assert "Imagic" not in human.scores["O"]


@pytest.mark.integration
def test_reproduces_published_gpt4o_figure():
    root = shared_path("benchmarks", "imagenhub_tie")
    rep = imagenhub_report(root / "human_ratings", root / "judge_outputs" / "gpt4o_0shot", n_boot=100)
    assert round(rep["value"], 4) == 0.3821
    assert rep["n_items"] == 1432 and rep["n_unparsable"] == 0
    assert rep["aspects"]["SC"]["value"] > 0 and rep["aspects"]["PQ"]["value"] > 0
    assert rep["aspects"]["O"]["ci95"][0] < 0.3821 < rep["aspects"]["O"]["ci95"][1]


def test_unparsable_judge_answers_are_counted(tmp_path):
    for m, sc in (("M1", {"u1": [5, 5], "u2": "[9, 9]", "u3": "no score"}), ("M2", {"u1": [1, 1], "u2": [2, 2], "u3": [3, 3]})):
        (tmp_path / m).mkdir()
        (tmp_path / m / "SC.json").write_text(json.dumps({k: {"score": v} for k, v in sc.items()}))
        (tmp_path / m / "PQ.json").write_text(json.dumps({k: {"score": [10, 10]} for k in sc}))
    preds = load_viescore_outputs(tmp_path)
    assert preds.total == 6 and len(preds.unparsable) == 1 and preds.unparsable[0]["uid"] == "u3"
    assert "u3" not in preds.scores["O"]["M1"]
