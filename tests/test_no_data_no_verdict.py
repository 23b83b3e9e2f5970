"""No verdict from no data, the metric's direction in every protocol, and no silent wrong value:
each becomes a clear refusal (file, line, field) or a figure marked "not measured" / "too few"."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import shared_path
from typer.testing import CliRunner

from editlens.bench import labels as L
from editlens.bench.editreward_bench import editreward_bench_report
from editlens.bench.editscore_bench import editscore_bench_report
from editlens.bench.genai_bench import load_genai_results
from editlens.bench.imagenhub import load_imagenhub_human
from editlens.bench.labels import LabelledPairs as Benchmark
from editlens.bench.labels import Pair
from editlens.bench.mmrb2 import mmrb2_report
from editlens.cli.main import app
from editlens.core.evidence import MIN_N, figure, shortfall
from editlens.core.types import Score
from editlens.errors import InputError
from editlens.runner.compare import decide

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------ the shared wording

def test_one_wording_for_no_data_and_too_few():
    assert shortfall(0, "every answer unscored") == "not measured (n = 0: every answer unscored)"
    assert shortfall(MIN_N - 1, "x") == f"too few (n = {MIN_N - 1}, fewer than {MIN_N})"
    assert shortfall(MIN_N, "x") is None
    assert figure(0.0, 0, "no verdict") == "not measured (n = 0: no verdict)"  # never "0.0000"


def test_probe_on_no_data_does_not_pass():
    from editlens.trust.probe import summarize

    # a judge whose every answer was unscored: no real score, no control score
    res = summarize({}, {}, {"viescore": True})
    assert res["viescore"]["verdicts"] == ["not measured (n = 0: no edit with both it and its control scored)"]


def test_genai_bench_without_verdicts_is_not_measured(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps([{"idx": i, "response": "no idea", "human_vote": "leftvote"} for i in range(5)]))
    res = cli("meta-eval", "genai-bench", "--judge-outputs", f)
    assert res.exit_code == 2 and "not measured (n = 0: none of the 5 answers holds a [[...]] verdict)" in res.output


def test_imagenhub_one_rater_prints_icc_not_measured(tmp_path):
    d = tmp_path / "ratings"
    d.mkdir()
    rows = "".join(f"u{i}\t[{i % 3 * 0.5}, 1]\t[{(i * 7) % 4 * 0.25}, 1]\n" for i in range(4))
    (d / "Text-Guided_IE_rater1.tsv").write_text("uid\tM1\tM2\n" + rows)
    preds = _jsonl(tmp_path / "p.jsonl", [{"id": f"{m}/u{i}", "score": (i * 5 + len(m)) % 7 / 7}
                                          for m in ("M1", "M2") for i in range(4)])
    res = cli("meta-eval", "imagenhub", "--ratings", d, "--predictions", preds, "--n-boot", 10)
    assert res.exit_code == 0, res.output
    assert "ICC(2,1) not measured (n = 0: fewer than two raters rated the same items)" in res.output
    assert "too few (n = 8, fewer than 10)" in res.output  # 4 items per method: the figure says how thin it is


# ------------------------------------------------------------------ direction from the spec

def _lower_is_better_case(tmp_path):
    """l1 (lower is better): edit 'good_k' differs less from its target than 'bad_k', and people prefer it."""
    scores = {}
    pairs = []
    for k in range(12):
        scores[f"good{k}"] = 0.1 + 0.01 * k
        scores[f"bad{k}"] = 0.5 + 0.02 * k
        pairs.append({"id": f"p{k}", "a": f"good{k}", "b": f"bad{k}", "preference": "A"} if k % 2 else
                     {"id": f"p{k}", "a": f"bad{k}", "b": f"good{k}", "preference": "B"})
    preds = _jsonl(tmp_path / "pred.jsonl", [{"id": i, "scores": {"l1": {"status": "scored", "value": v}}}
                                            for i, v in scores.items()])
    human = _jsonl(tmp_path / "pairs.jsonl", pairs)
    return scores, pairs, preds, human


def test_meta_eval_pairwise_agrees_with_compare_on_a_lower_is_better_metric(tmp_path):
    scores, pairs, preds, human = _lower_is_better_case(tmp_path)
    # compare's rule: the lower l1 wins
    verdicts = [decide(Score("l1", scores[p["a"]], "scored"), Score("l1", scores[p["b"]], "scored"), False, "l1")["verdict"]
                for p in pairs]
    assert verdicts == [{"A": "A>B", "B": "B>A"}[p["preference"]] for p in pairs]
    res = cli("meta-eval", "pairwise", "--human", human, "--predictions", preds, "--metric", "l1", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["accuracy"] == 1.0 and rep["direction"].startswith("lower is better")


def test_reward_bench_protocols_follow_the_direction():
    scores = {"a": 0.1, "b": 0.9, "c": 0.2, "d": 0.8}  # l1: a and c are the better edits
    pairs = [Pair("x", "a", "b", 1, {"chosen": "A", "k": 2, "group": "x", "task": "color_alter",
                                     "dimension": "overall"}),
             Pair("y", "d", "c", -1, {"chosen": "B", "k": 2, "group": "y", "task": "color_alter",
                                      "dimension": "overall"})]
    bench = Benchmark("mmrb2", "-", {}, pairs)
    assert mmrb2_report(bench, scores=scores, metric="l1")["accuracy"] == 1.0
    assert mmrb2_report(bench, scores=scores, metric=None)["accuracy"] == 0.0  # unknown direction: higher is better
    assert editreward_bench_report(bench, scores, "l1")["strict_accuracy"] == 1.0
    results = {k: {"status": "scored", "value": v, "details": {}} for k, v in scores.items()}
    es = editscore_bench_report(Benchmark("editscore-bench", "-", {}, [pairs[0], Pair("y", "c", "d", 1, pairs[1].meta)]),
                                results, "l1")
    assert es["dimensions"]["overall"]["average"] == 1.0


def test_pointwise_of_a_lower_is_better_metric_is_positive(tmp_path):
    human = _jsonl(tmp_path / "h.jsonl", [{"id": f"e{i}", "model": f"m{i % 3}", "human": float(i)} for i in range(12)])
    preds = _jsonl(tmp_path / "p.jsonl", [{"id": f"e{i}", "scores": {"l1": {"status": "scored", "value": 1.0 - i / 20}}}
                                          for i in range(12)])
    res = cli("meta-eval", "pointwise", "--human", human, "--predictions", preds, "--metric", "l1", "--json",
              "--n-boot", 10)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["value"] == pytest.approx(1.0) and rep["system_level"]["kendall_tau"] == pytest.approx(1.0)


# ------------------------------------------------------------------ duplicates, non-finite, booleans, self-pairs

@pytest.mark.parametrize("rows, message", [
    ([{"id": "a", "model": "m", "human": 1}, {"id": "a", "model": "m", "human": 3}], "h.jsonl:2: id 'a' repeated"),
    ([{"id": "a", "human": float("inf")}], "h.jsonl:1: field 'human' is inf, not a finite number"),
    ([{"id": "a", "human": None}], "h.jsonl:1: field 'human' is null, not a number"),
    ([{"id": "a", "human": True}], "h.jsonl:1: field 'human' is true, not a number"),
    ([{"id": "a", "human": "good"}], "h.jsonl:1: field 'human' is 'good', not a number"),
])
def test_pointwise_human_refusals(tmp_path, rows, message):
    path = tmp_path / "h.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes inf as Infinity
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        L.load_pointwise_human(path)


def test_an_identical_repeat_counts_once(tmp_path):
    path = _jsonl(tmp_path / "h.jsonl", [{"id": "a", "human": 2}, {"id": "a", "human": 2}])
    assert L.load_pointwise_human(path)[0] == {"a": 2.0}


@pytest.mark.parametrize("rows, message", [
    ([{"id": "a", "score": 0.1}, {"id": "a", "score": 0.2}], "p.jsonl:2: id 'a' repeated with another value"),
    ([{"id": "a", "score": True}], "p.jsonl:1: field 'score' is true"),
    ([{"id": "a", "score": float("nan")}], "p.jsonl:1: field 'score' is NaN"),
])
def test_prediction_refusals(tmp_path, rows, message):
    from editlens.bench.labels import load_results

    path = _jsonl(tmp_path / "p.jsonl", rows)
    for load in (L.load_predictions, lambda p, m: load_results(p, m)):
        with pytest.raises(InputError, match=message):
            load(path, None)


def test_pairs_refuse_self_pairs_and_conflicting_repeats(tmp_path):
    with pytest.raises(InputError, match="pairs.jsonl:1: fields 'a' and 'b' are the same edit 'x'"):
        L.load_pairwise_human(_jsonl(tmp_path / "pairs.jsonl", [{"id": "p", "a": "x", "b": "x", "preference": "A"}]))
    with pytest.raises(InputError, match="pairs.jsonl:2: pair id 'p' repeated"):
        L.load_pairwise_human(_jsonl(tmp_path / "pairs.jsonl", [{"id": "p", "a": "x", "b": "y", "preference": "A"},
                                                                {"id": "p", "a": "x", "b": "y", "preference": "B"}]))


def test_genai_bench_repeated_item_with_another_vote_is_refused(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps([{"idx": 1, "response": "[[A>B]]", "human_vote": "leftvote"},
                             {"idx": 1, "response": "[[A>B]]", "human_vote": "rightvote"}]))
    with pytest.raises(InputError, match="item 1: idx '1' repeated"):
        load_genai_results(f)


def test_calibrate_refuses_nan_good_at_and_single_class(tmp_path):
    human = _jsonl(tmp_path / "h.jsonl", [{"id": f"e{i}", "human": i} for i in range(12)])
    preds = _jsonl(tmp_path / "p.jsonl", [{"id": f"e{i}", "score": i / 12} for i in range(12)])
    res = cli("calibrate", "pointwise", "--human", human, "--predictions", preds, "--good-at", "nan",
              "--out", tmp_path / "c.json")
    assert res.exit_code == 2 and "--good-at must be a finite number" in res.output
    res = cli("calibrate", "pointwise", "--human", human, "--predictions", preds, "--good-at", "100",
              "--out", tmp_path / "c.json")
    assert res.exit_code == 2 and "a single class" in res.output


def test_boolean_in_a_score_list_is_unscored():
    from editlens.judges.parsing import parse_scores, read_scores

    assert parse_scores('{"score": [true, 8], "reasoning": "fine"}') is None
    assert read_scores('{"score": [true, 8]}')[2] == "the JSON 'score' field is not a list of numbers"


@pytest.mark.integration
def test_imagenhub_repeated_uid_is_refused(tmp_path):
    root = shared_path("benchmarks", "imagenhub_tie")
    d = tmp_path / "ratings"
    shutil.copytree(root / "human_ratings", d)
    f = sorted(d.glob("*rater*.tsv"))[0]
    lines = f.read_text().splitlines()
    cells = lines[1].split("\t")
    cells[1] = "[0.0, 0.0]" if cells[1] != "[0.0, 0.0]" else "[1.0, 1.0]"
    f.write_text("\n".join(lines + ["\t".join(cells)]) + "\n")
    with pytest.raises(InputError, match=f"{f.name}:{len(lines) + 1}: uid '{cells[0]}' repeated with another value"):
        load_imagenhub_human(d)


# ------------------------------------------------------------------ the tracebacks: a message and exit 2

def test_commands_given_the_wrong_kind_of_out_path(tmp_path):
    human = _jsonl(tmp_path / "h.jsonl", [{"id": f"e{i}", "human": i % 2} for i in range(12)])
    preds = _jsonl(tmp_path / "p.jsonl", [{"id": f"e{i}", "score": i / 12} for i in range(12)])
    a_file = _jsonl(tmp_path / "f.jsonl", [{"x": 1}])
    res = cli("calibrate", "pointwise", "--human", human, "--predictions", preds, "--out", tmp_path)
    assert res.exit_code == 2 and "is a folder; give a file name" in res.output
    for kind in ("editscore-bench", "editreward-bench", "mmrb2"):
        res = cli("meta-eval", "prepare", kind, tmp_path, "--out", a_file)
        assert res.exit_code == 2 and "is a file; give a folder" in res.output, (kind, res.output)
    res = cli("probe", a_file, "--out", a_file, "--metrics", "l1")
    assert res.exit_code == 2 and "is a file; give a folder" in res.output
    human_null = _jsonl(tmp_path / "hn.jsonl", [{"id": "e0", "human": None}])
    res = cli("meta-eval", "pointwise", "--human", human_null, "--predictions", preds)
    assert res.exit_code == 2 and "hn.jsonl:1: field 'human' is null" in res.output
    res = cli("meta-eval", "pointwise", "--human", human, "--predictions", preds, "--n-boot", "-5")
    assert res.exit_code == 2 and "--n-boot" in res.output


# ------------------------------------------------------------------ invented scores and consistency

@pytest.mark.parametrize("lp, why", [(float("nan"), "nan"), (0.4, "above 0")])
def test_impossible_log_probability_is_a_failed_answer_never_cached(lp, why):
    from editlens.backends.wire import parse_response

    body = {"choices": [{"message": {"content": "YES"}, "finish_reason": "stop",
                         "logprobs": {"content": [{"token": "YES", "logprob": lp,
                                                   "top_logprobs": [{"token": "YES", "logprob": lp}]}]}}]}
    g = parse_response(body, ("YES", "NO"))
    # an error is what the cache layer never stores (CachedBackend keeps only error-free answers): asked again
    assert g.error is not None and why in g.error and g.text is None


def test_a_name_asked_twice_is_built_once():
    from editlens.runner.selection import select_metrics

    sel = select_metrics(["l1"], extra=["l1"], device="cpu")
    assert [m.name for m in sel.metrics] == ["l1"]


def test_run_checks_exports_before_scoring(tmp_path, monkeypatch):
    import sys

    from helpers import EXAMPLES

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as without pyarrow
    out = tmp_path / "r"
    res = cli("run", EXAMPLES / "manifest.jsonl", "--out", out, "--metrics", "l1", "--export", "csv,parquet",
              "--no-progress")
    assert res.exit_code == 2 and "Parquet export needs pyarrow" in res.output
    assert not (out / "results.jsonl").exists()  # nothing was scored first
    res = cli("run", EXAMPLES / "manifest.jsonl", "--out", out, "--metrics", "l1", "--export", "xlsx")
    assert res.exit_code == 2 and "unknown export format 'xlsx'" in res.output


def test_runs_diff_and_summary_say_not_measured(tmp_path):
    from helpers import EXAMPLES

    a, b = tmp_path / "a", tmp_path / "b"
    assert cli("run", EXAMPLES / "manifest.jsonl", "--out", a, "--metrics", "l1", "--no-progress").exit_code == 0
    assert cli("run", EXAMPLES / "manifest.jsonl", "--out", b, "--metrics", "l2", "--no-progress").exit_code == 0
    res = cli("runs", "diff", a, b)
    assert res.exit_code == 2 and "not measured (n = 0: no evaluator ran in both)" in res.output
    res = cli("runs", "summary", a)
    assert res.exit_code == 0 and "too few (n = " in res.output  # the example manifest holds a handful of edits


# ------------------------------------------------------------------ view: Host, token, only loaded images

def _get(url, host=None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def test_view_refuses_a_foreign_host_and_images_the_run_did_not_load(tmp_path):
    from helpers import EXAMPLES

    from editlens.reporting.serve import ReportServer

    rows = [json.loads(x) for x in (EXAMPLES / "manifest.jsonl").read_text().splitlines() if x.strip()]
    for r in rows:
        for k in ("source", "edited"):
            r[k] = str((EXAMPLES / r[k]).resolve())
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    rows[0]["edited"] = str(secret)  # a hostile row: the run cannot load it, so view must not serve it
    manifest = _jsonl(tmp_path / "m.jsonl", rows)
    run = tmp_path / "run"
    res = cli("run", manifest, "--out", run, "--metrics", "l1", "--no-progress")
    assert res.exit_code == 3, res.output  # the row that is no image failed
    server = ReportServer(run, manifest=manifest)
    server.serve_in_background()
    try:
        port = server.url.split(":")[2].split("/")[0]
        status, _, body = _get(server.url, host=f"evil.example:{port}")  # DNS rebinding: the page's own name
        assert status == 403 and b"Host 'evil.example" in body
        assert _get(server.url)[0] == 200
        # the run never read the row's file, so the report does not link it, and nothing past the list is served
        assert str(secret) not in server.images
        assert _get(f"{server.url}image/{len(server.images)}")[0] == 404
        good = next(i for i, p in enumerate(server.images) if p != str(secret))
        status, headers, _ = _get(f"{server.url}image/{good}")
        assert status == 200 and headers["Content-Type"].startswith("image/")
    finally:
        server.close()
    server = ReportServer(run, manifest=manifest, token="t0k")
    server.serve_in_background()
    try:
        assert server.url.endswith("?token=t0k")
        assert _get(server.url.split("?")[0])[0] == 403  # no token
        status, headers, _ = _get(server.url)
        assert status == 200 and "editlens_view_token=t0k" in headers["Set-Cookie"]
    finally:
        server.close()


def test_report_of_a_run_read_with_columns_shows_its_images(tmp_path):
    from helpers import EXAMPLES

    from editlens.reporting.collect import collect_run

    rows = [json.loads(x) for x in (EXAMPLES / "manifest.jsonl").read_text().splitlines() if x.strip()]
    aurora = _jsonl(tmp_path / "edits.jsonl", [{"input": str((EXAMPLES / r["source"]).resolve()),
                                                "output": str((EXAMPLES / r["edited"]).resolve()),
                                                "instruction": r["instruction"]} for r in rows])
    run = tmp_path / "run"
    res = cli("run", aurora, "--out", run, "--metrics", "l1", "--no-progress", "--columns", "source=input,edited=output")
    assert res.exit_code == 0, res.output
    data = collect_run(run)
    assert len(data["samples"]) == len(rows) and all(s["images"].get("edited") for s in data["samples"])
    assert not any("show no images" in n for n in data["notes"])


def test_dice_eval_over_nothing_or_other_ids_exits_2(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = cli("dice-eval", "--gt", empty, "--predictions", empty)
    assert res.exit_code == 2 and "not measured (n = 0: the ground-truth file holds no sample)" in res.output


def test_pointwise_over_a_single_class_exits_2(tmp_path):
    human = _jsonl(tmp_path / "h.jsonl", [{"id": f"e{i}", "human": 1} for i in range(12)])
    preds = _jsonl(tmp_path / "p.jsonl", [{"id": f"e{i}", "score": i / 12} for i in range(12)])
    res = cli("meta-eval", "pointwise", "--human", human, "--predictions", preds)
    assert res.exit_code == 2 and "a single class" in res.output


def test_candidate_distribution_never_reads_impossible_log_probabilities():
    from editlens.backends.types import Generation, TokenStep

    def dist(cands):
        return Generation("YES", [TokenStep("YES", -0.1, cands, [])]).candidate_distribution(0)

    assert dist({"YES": -0.1, "NO": -2.4})["YES"] > 0.5
    assert dist({"YES": float("nan"), "NO": -2.4}) is None
    assert dist({"YES": 0.5, "NO": -2.4}) is None
    assert dist({"YES": float("-inf"), "NO": float("-inf")}) is None


def test_serve_refuses_a_prefill_slice_or_aspect_limit_it_cannot_keep():
    # long prompts are prefilled in slices (tests/test_prefill_slices.py): no cap on --max-prompt-tokens
    res = cli("serve", "--vlm", "x", "--prefill-tokens", 0)
    assert res.exit_code == 2 and "--prefill-tokens" in res.output
    res = cli("serve", "--vlm", "x", "--max-aspect-ratio", 0.5)
    assert res.exit_code == 2 and "--max-aspect-ratio" in res.output


def test_run_and_probe_over_only_invalid_rows_exit_2(tmp_path):
    manifest = _jsonl(tmp_path / "m.jsonl", [{"id": "a", "source": "nope.png", "edited": "nope.png", "instruction": "x"}])
    for cmd in ("run", "probe"):
        res = cli(cmd, manifest, "--out", tmp_path / cmd, "--metrics", "l1", "--skip-invalid", "--no-progress")
        assert res.exit_code == 2, (cmd, res.output)
        assert "not measured (n = 0: all 1 rows were skipped as invalid)" in res.output


def test_imagenhub_of_a_lower_is_better_metric_reads_it_turned(tmp_path):
    d = tmp_path / "ratings"
    d.mkdir()
    for r in (1, 2):
        (d / f"Text-Guided_IE_rater{r}.tsv").write_text(
            "uid\tM1\n" + "".join(f"u{i}\t[{i / 12:.3f}, 1]\n" for i in range(12)))
    preds = _jsonl(tmp_path / "p.jsonl", [{"id": f"M1/u{i}", "scores": {"l1": {"status": "scored", "value": 1 - i / 12}}}
                                          for i in range(12)])
    res = cli("meta-eval", "imagenhub", "--ratings", d, "--predictions", preds, "--metric", "l1", "--json",
              "--n-boot", 10)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["aspects"]["O"]["per_group"]["M1"] == pytest.approx(1.0) and rep["direction"].startswith("lower")
