"""``editlens bench``: list/info, a benchmark added in one file, and ``bench
run`` end to end (CLI and Python) on a tiny GEdit-Bench judged by a fake
OpenAI-compatible server: skipped outputs, unscored answers, resume, the
judge's identity in the manifest, the written tables."""

from __future__ import annotations

import json
import re

import bench_files as F
import pytest
from fake_openai import FakeServer
from typer.testing import CliRunner

from editlens.bench.base import BenchItem, Benchmark, BenchSpec
from editlens.bench.registry import register, unregister
from editlens.cli.main import app

runner = CliRunner()


class ScoringServer(FakeServer):
    """Answers SC with the scores written in the instruction (``sc=A,B``), PQ with [9, 8]."""

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        text = json.dumps(body.get("messages", ""))
        m = re.search(r"sc=(\d+),(\d+)", text)
        if m:
            return json.dumps({"reasoning": "seen", "score": [int(m.group(1)), int(m.group(2))]})
        return '{"reasoning": "clean", "score": [9, 8]}'


INSTRUCTIONS = {"k1": "edit k1 sc=9,4", "k2": "edit k2 sc=8,8", "k3": "edit k3 case:unparsable", "k4": "edit k4 sc=2,8"}


def test_a_new_benchmark_is_one_class_and_shows_in_list_and_info():
    @register
    class Tiny(Benchmark):
        spec = BenchSpec(name="tiny-test-bench", title="Tiny", homepage="https://example.org", download="echo hi",
                         layout="nothing", categories=("a", "b"), protocols={"tiny": "nothing at all"})

    try:
        out = runner.invoke(app, ["bench", "list"])
        assert out.exit_code == 0 and "tiny-test-bench" in out.output and "gedit" in out.output
        info = runner.invoke(app, ["bench", "info", "tiny-test-bench", "--json"])
        assert json.loads(info.output)["download"] == "echo hi"
        with pytest.raises(ValueError, match="already registered"):
            register(type("Other", (Benchmark,), {"spec": Tiny.spec}))
    finally:
        unregister("tiny-test-bench")
    bad = runner.invoke(app, ["bench", "info", "no-such-bench"])
    assert bad.exit_code == 2 and "unknown benchmark 'no-such-bench'" in bad.output


def test_bench_run_gedit_end_to_end(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "good", ["k1", "k2", "k3", "k4"])
    F.gedit_outputs(edits, "lazy", ["k1"])
    out = tmp_path / "out"
    fake = ScoringServer()
    with fake.running() as url:
        args = ["bench", "run", "gedit", "--data", str(data), "--edits", str(edits), "--out", str(out), "--vlm", url,
                "--cache", str(tmp_path / "c.sqlite"), "--n-boot", "50"]
        est = runner.invoke(app, args + ["--estimate"])
        assert est.exit_code == 0, est.output
        assert "16 judge calls for 4 cases x 2 model(s)" in est.output and "(10 for the 5 outputs found" in est.output
        assert "+ 1 start-up probe request" in est.output  # the engine check's probe is counted too
        assert fake.requests == []  # an estimate asks nothing
        res = runner.invoke(app, args + ["--json"])
        assert res.exit_code == 0, res.output
        t = json.loads(res.output)
        asked = len(fake.requests)
        again = runner.invoke(app, args + ["--json"])  # resumes: nothing asked twice
        assert again.exit_code == 0 and len(fake.requests) == asked
    good = t["models"]["good"]
    secs = {s["name"]: s for s in good["sections"]}
    # k1: SC min(9,4)=4, PQ min(9,8)=8, O=sqrt(32); k2: SC 8, O 8; k3 unscored (missing, not zero)
    bg = secs["EN fullset"]["rows"][0]["cells"]
    assert bg["SC"]["value"] == 6.0 and bg["O"]["value"] == pytest.approx((32 ** 0.5 + 8) / 2) and bg["O"]["n"] == 2
    assert secs["EN fullset"]["rows"][1]["cells"]["O"]["value"] is None  # color_alter: its only answer was unreadable
    assert secs["EN intersection"]["overall"]["cells"]["O"]["value"] == pytest.approx(32 ** 0.5)
    assert secs["CN fullset"]["overall"]["cells"]["O"]["value"] == pytest.approx(4.0)
    assert (good["counts"]["scored"], good["counts"]["unscored"], good["counts"]["skipped"]) == (3, 1, 0)
    lazy = t["models"]["lazy"]["counts"]
    assert lazy["skipped"] == 3 and any("lazy/fullset/color_alter/en/k3.png" in p for p in lazy["skipped_paths"])
    # the judge's identity: prompts (fallback, marked), hash, temperature, seed, served model and /v1/models
    assert t["prompts"]["from_clone"] is False and "fallback" in t["prompts"]["source"]
    manifest = json.loads((out / "run" / "manifest.json").read_text())
    judge = manifest["evaluators"][0]
    assert judge["prompts"]["sha256"] == t["prompts"]["sha256"] and judge["temperature"] == 0.0 and judge["seed"] == 0
    assert "fake" in json.dumps(judge["provenance"])
    for name in ("table.json", "table.csv", "table.md", "table.tex", "items.jsonl", "report.html"):
        assert (out / name).is_file(), name
    md = (out / "table.md").read_text()
    assert "| background_change |" in md and "1 unscored (missing, not zero)" in md
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    k3 = next(r for r in items if r["id"] == "good/color_alter/en/k3")
    assert k3["status"] == "unscored" and k3["scores"] == {} and "SC" in k3["reason"]
    # every published column is kept; the full-size input as its reference into the table file
    assert all("intersection" in r and "#row=" in r["input_image_raw"] for r in items)
    assert "fallback wording" in (out / "report.html").read_text()
    # every table names how answers were read (editlens' own prompts: strictly) and counts differing readings
    assert "Answers read: strict (asked for release" in md and "0 item(s) read differently" in md
    assert "Answers read: strict" in (out / "report.html").read_text() and t["answers"]["read_differently"] == 0
    assert "\\begin{tabular}" in (out / "table.tex").read_text()
    # the models side by side, ranked by the paper's headline (EN fullset O): good 6.83 (its color_alter has no
    # score, so its average is background_change's), lazy sqrt(32) from k1 alone
    comp = t["comparison"]
    assert comp["ranked_by"] == {"section": "EN fullset", "figure": "O", "order": "higher first"}
    assert [(r["model"], r["rank"]) for r in comp["rows"]] == [("good", 1), ("lazy", 2)]
    # good's EN fullset figures rest on 2 items, lazy's on 1: no best is marked between them, and it is said
    assert comp["best"] == {} and comp["uneven"]["EN fullset / O"] == {"good": 2, "lazy": 1}
    assert "rest on different numbers of items (EN fullset / O: good: n = 2, lazy: n = 1" in comp["ranking"]
    assert "not like for like" in comp["ranking"]
    assert "## Models compared" in md and "| 1 | good | 6.000 | 8.000 | 6.828 | 4.000 |" in md
    assert "different numbers of items" in md
    assert "models compared" in (out / "table.tex").read_text()
    page = (out / "report.html").read_text()
    assert "Models compared" in page and "ranked by EN fullset O (higher first)" in page and "★ 6.828" not in page


def test_bench_run_from_python_with_a_failed_request_exits_nonzero(tmp_path):
    from editlens.runner.bench import run_benchmark

    data = F.gedit(tmp_path / "gedit", instructions={**INSTRUCTIONS, "k2": "edit k2 case:500"})
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "m", ["k1", "k2"])
    from editlens.backends.factory import HttpSettings

    # how the judge's requests are fetched is passed down (no process-wide default to set and reset)
    with ScoringServer().running() as url:
        t = run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=20,
                          progress=False, http=HttpSettings(timeout=2.0, max_retries=0, concurrency=4))
    c = t["models"]["m"]["counts"]
    assert (c["scored"], c["failed"], c["skipped"]) == (1, 1, 2) and t["exit"] == 1


def test_every_builtin_benchmark_has_a_catalog_entry():
    from pathlib import Path

    from editlens.bench.registry import all_benchmarks

    page = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks-catalog.md").read_text(encoding="utf-8")
    for b in all_benchmarks():
        assert f"(`{b.spec.name}`)" in page and b.spec.download in page, b.spec.name


def test_bench_run_magicbrush_metric_suite_against_the_ground_truth(tmp_path, tiny_clip_dir, tiny_dino_dir):
    import numpy as np
    from PIL import Image

    data = F.magicbrush_test(tmp_path)
    edits = tmp_path / "edits"
    F.save(edits / "ed" / "242679_1.png", F.png(50))  # turn 2's output is missing
    res = runner.invoke(app, ["bench", "run", "magicbrush", "--data", str(data), "--edits", str(edits), "--out",
                              str(tmp_path / "out"), "--model", f"clip={tiny_clip_dir}", "--model",
                              f"dino={tiny_dino_dir}", "--device", "cpu", "--n-boot", "20", "--json", "--no-report"])
    assert res.exit_code == 0, res.output
    t = json.loads(res.output)
    m = t["models"]["ed"]
    single = m["sections"][0]
    turn1 = single["rows"][0]["cells"]
    edited = np.asarray(Image.open(edits / "ed" / "242679_1.png").convert("RGB"), dtype=float) / 255
    truth = np.asarray(Image.open(data / "images" / "242679" / "242679-output1.png").convert("RGB"), dtype=float) / 255
    assert turn1["L1"]["value"] == pytest.approx(np.abs(edited - truth).mean(), abs=1e-6)
    assert turn1["L2"]["value"] == pytest.approx(((edited - truth) ** 2).mean(), abs=1e-6)
    assert turn1["CLIP-T"]["n"] == 1 and -1 <= turn1["DINO"]["value"] <= 1
    assert m["counts"]["skipped"] == 1 and "242679_2.png" in m["counts"]["skipped_paths"][0]
    assert t["judge"] is None and t["metrics"]["l2_ref"] == "L2"


def test_human_label_adapters_give_the_meta_eval_commands_numbers(tmp_path):
    from editlens.bench.aurora import pairwise_report, pointwise_report
    from editlens.bench.registry import get

    human = tmp_path / "human.jsonl"
    pred = tmp_path / "pred.jsonl"
    human.write_text("".join(json.dumps({"id": f"e{i}", "model": "ab"[i % 2], "human": h}) + "\n"
                             for i, h in enumerate([1, 3, 2, 5, 4, 6])))
    pred.write_text("".join(json.dumps({"id": f"e{i}", "score": s}) + "\n" for i, s in enumerate([1, 2, 3, 4, 6, 5])))
    aurora = get("aurora")
    assert aurora.run_protocol("aurora", human_path=human, pred_path=pred, n_boot=50)["value"] == \
        pointwise_report(human, pred, None, "aurora", 50)["value"]
    scores, models = aurora.labels(human)
    assert scores["e3"] == 5.0 and models["e1"] == "b"
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in [{"id": "p1", "a": "e0", "b": "e1", "preference": "B"},
                                                              {"id": "p2", "a": "e4", "b": "e5", "preference": "A"},
                                                              {"id": "p3", "a": "e2", "b": "e3", "preference": "tie"}]))
    rule = aurora.run_protocol("adiee-released-rule", human=pairs, predictions=pred)
    # round(s/5): e0 0 vs e1 0 tie (human B: wrong); e4 1 vs e5 1 tie (wrong); e2 1 vs e3 1 tie (right)
    assert rule["released_rule_accuracy"] == pytest.approx(1 / 3) and rule["n"] == 3
    assert rule["accuracy_with_ties"]["accuracy"] == pairwise_report(pairs, pred)["accuracy"]
    out = runner.invoke(app, ["adiee", "pairwise-eval", "--human", str(pairs), "--predictions", str(pred), "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["released_rule_accuracy"] == pytest.approx(1 / 3)
    # a pair whose edit has no score: the release divides by all pairs (counted wrong), the default by scored pairs
    more = tmp_path / "pairs4.jsonl"
    more.write_text(pairs.read_text() + json.dumps({"id": "p4", "a": "e2", "b": "missing", "preference": "tie"}) + "\n")
    scored = aurora.run_protocol("adiee-released-rule", human=more, predictions=pred)
    every = aurora.run_protocol("adiee-released-rule", human=more, predictions=pred, denominator="all")
    assert (scored["released_rule_accuracy"], scored["n"]) == (pytest.approx(1 / 3), 3)
    assert (every["released_rule_accuracy"], every["n"], every["unscored_pairs"]) == (pytest.approx(1 / 4), 4, 1)
    out = runner.invoke(app, ["adiee", "pairwise-eval", "--human", str(more), "--predictions", str(pred),
                              "--denominator", "all"])
    assert out.exit_code == 0 and "0.2500 over 4 pairs (all pairs, 1 without both scores counted wrong)" in out.output
    bad = runner.invoke(app, ["adiee", "pairwise-eval", "--human", str(more), "--predictions", str(pred),
                              "--denominator", "some"])
    assert bad.exit_code == 2 and "scored or all" in bad.output


class LinesServer(FakeServer):
    """Answers in ImgEdit's line format; an instruction with 'short' gets two lines only."""

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        text = json.dumps(body.get("messages", ""))
        if "short" in text:
            return "Brief reasoning: fine.\nPrompt Compliance: 4\nVisual Naturalness: 5"
        return "Brief reasoning: fine.\nPrompt Compliance: 4\nVisual Naturalness: 5\nPhysical & Detail Integrity: 3"


def test_imgedit_with_the_clones_prompts_reads_the_releases_answer_format(tmp_path):
    root = F.imgedit(tmp_path / "bench")
    data = json.loads((root / "basic_edit.json").read_text())
    data["12"]["prompt"] = "Add a short hat."
    (root / "basic_edit.json").write_text(json.dumps(data))
    clone = tmp_path / "ImgEdit"
    prompts = {t: f"Judge this {t} edit. Instruction: <edit_prompt>." for t in
               ("replace", "add", "adjust", "remove", "style", "action", "extract", "background", "compose")}
    F.save(clone / "Benchmark" / "Basic" / "prompts.json", json.dumps(prompts).encode())
    edits = tmp_path / "edits"
    for key in ("1082", "673", "12"):
        F.save(edits / "m" / f"{key}.png", F.png(int(key)))
    fake = LinesServer()
    args = ["bench", "run", "imgedit", "--data", str(root), "--edits", str(edits), "--out", str(tmp_path / "out"),
            "--prompts-from", str(clone), "--cache", "none", "--n-boot", "20", "--json", "--no-report"]
    with fake.running() as url:
        res = runner.invoke(app, args + ["--vlm", url])
        asked = len(fake.requests)
        strict = runner.invoke(app, args + ["--vlm", url, "--answers", "strict"])
    assert res.exit_code == 0, res.output
    assert strict.exit_code == 0 and len(fake.requests) == asked  # the stored answers are re-read, not asked again
    t, s = json.loads(res.output), json.loads(strict.output)
    sent = json.dumps(fake.bodies)
    assert "Judge this adjust edit. Instruction: Make the shell smooth.." in sent  # the clone's wording, filled in
    assert t["prompts"]["from_clone"] is True and t["prompts"]["source"] == str(clone)
    cells = {r["row"]: r["cells"]["score"] for r in t["models"]["m"]["sections"][0]["rows"]}
    assert cells["adjust"]["value"] == 4.0 and cells["style"]["value"] == 4.0
    # two lines: the release averages them (4.5); editlens' strict reader leaves the edit unscored
    assert cells["add"]["value"] == 4.5 and t["models"]["m"]["counts"]["unscored"] == 0
    assert t["answers"]["policy"] == "release" and t["answers"]["read_differently"] == 1
    assert t["answers"]["per_model"]["m"]["items"] == ["m/12"]
    strict_cells = {r["row"]: r["cells"]["score"] for r in s["models"]["m"]["sections"][0]["rows"]}
    assert strict_cells["add"]["value"] is None and s["models"]["m"]["counts"]["unscored"] == 1
    assert s["answers"]["policy"] == "strict" and s["answers"]["read_differently"] == 1


def test_a_refused_or_filtered_judge_answer_is_missing_never_zero():
    from editlens.backends.types import Generation
    from editlens.bench.judge import BenchJudge
    from editlens.bench.prompts import PromptSet
    from editlens.bench.registry import get

    b = get("gedit")
    judge = BenchJudge(b, PromptSet(b.fallback_prompts(), False, "fallback"), {}, vlm="http://127.0.0.1:9/v1")
    it = BenchItem("x", "x", "do it", None, "subject-add")
    qs = b.questions(it, judge.prompts)
    good = Generation('{"reasoning": "ok", "score": [8, 6]}')
    refused = judge._score(it, qs, [Generation("I'm sorry, but I can't help with that."), good])
    filtered = judge._score(it, qs, [Generation('{"score": [0, 0]}', finish_reason="content_filter"), good])
    lost = judge._score(it, qs, [Generation(None, error="HTTP 503"), good])
    ok = judge._score(it, qs, [good, good])
    assert refused.status == filtered.status == "unscored" and refused.value is None and filtered.value is None
    assert "refused" in refused.reason and "content filter" in filtered.reason and refused.details["refused"]
    assert lost.status == "failed"
    assert ok.status == "scored" and ok.value == pytest.approx(36 ** 0.5) and ok.details["figures"]["SC"] == 6.0


@pytest.mark.slow  # builds a tiny Qwen2.5-VL and generates on CPU (~20 s)
def test_bench_run_with_a_local_tiny_judge(tmp_path):
    from editlens.testing import tiny_reward as TR

    vlm = TR.program_answer(TR.build_qwen_vl(tmp_path / "vlm", "qwen2_5_vl"), ['{"score": [7, 6]}'])
    data = F.gedit(tmp_path / "gedit")
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "m", ["k1", "k3"])
    res = runner.invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(edits), "--out",
                              str(tmp_path / "out"), "--vlm", str(vlm), "--device", "cpu", "--max-new-tokens", "8",
                              "--cache", "none", "--n-boot", "20", "--json", "--no-report"])
    assert res.exit_code == 0, res.output
    t = json.loads(res.output)
    en = t["models"]["m"]["sections"][0]
    assert en["overall"]["cells"]["O"]["value"] == pytest.approx(6.0) and en["overall"]["cells"]["O"]["n"] == 2
    assert t["judge"]["provenance"]["backend"]  # the local weights' identity is pinned


def test_a_case_listed_twice_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from editlens.errors import InputError
    from editlens.runner.bench import run_benchmark

    data = F.gedit(tmp_path / "gedit")
    f = next((data / "data").glob("*.parquet"))
    t = pq.read_table(f)
    pq.write_table(pa.concat_tables([t, t.slice(0, 1)]), f)
    (tmp_path / "edits" / "m").mkdir(parents=True)
    with pytest.raises(InputError, match=r"case 'background_change/en/k1' appears twice") as err:
        run_benchmark("gedit", data, tmp_path / "out", edits=tmp_path / "edits", vlm="http://127.0.0.1:9/v1")
    # the two cases said in a line, not as ~600 characters of Python reprs
    msg = str(err.value).split(": ", 1)[1]
    assert msg == ("case 'background_change/en/k1' appears twice (instructions 'edit k1' and 'edit k1'); every "
                   "case needs its own id")


def test_bench_run_makes_the_edits_with_an_editor_then_judges_them(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    out = tmp_path / "out"
    spec = "callable:editlens.editors.callable_editor:identity_edit"
    with ScoringServer().running() as url:
        args = ["bench", "run", "gedit", "--data", str(data), "--editor", spec, "--out", str(out), "--vlm", url,
                "--cache", "none", "--n-boot", "20", "--json", "--no-report"]
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        again = runner.invoke(app, args)  # generation and judging both resume
        assert again.exit_code == 0, again.output
    t = json.loads(res.output)
    m = t["models"]["identity_edit"]
    assert (m["counts"]["scored"], m["counts"]["unscored"]) == (3, 1)
    assert (out / "edits" / "identity_edit" / "editor.json").is_file() and t["editors"]["identity_edit"]["seed"] == 0
    assert json.loads(again.output)["models"]["identity_edit"]["sections"] == m["sections"]


def test_multi_turn_editing_chains_the_editors_own_outputs(tmp_path, tiny_clip_dir, tiny_dino_dir):
    import numpy as np
    from PIL import Image

    data = F.magicbrush_test(tmp_path)
    res = runner.invoke(app, ["bench", "run", "magicbrush-multiturn", "--data", str(data), "--editor",
                              "callable:editlens.editors.callable_editor:identity_edit", "--out", str(tmp_path / "out"),
                              "--model", f"clip={tiny_clip_dir}", "--model", f"dino={tiny_dino_dir}", "--device", "cpu",
                              "--n-boot", "20", "--json", "--no-report"])
    assert res.exit_code == 0, res.output
    multi, final = json.loads(res.output)["models"]["identity_edit"]["sections"]

    def img(name):  # type: ignore[no-untyped-def]
        return np.asarray(Image.open(data / "images" / "242679" / name).convert("RGB"), dtype=float) / 255

    # the identity editor returns its input: turn 2 edits turn 1's output (the original input), not the
    # ground-truth input of turn 2 (242679-output1.png)
    turn2 = multi["rows"][1]["cells"]["L1"]["value"]
    assert turn2 == pytest.approx(np.abs(img("242679-input.png") - img("242679-output2.png")).mean(), abs=1e-6)
    assert turn2 != pytest.approx(np.abs(img("242679-output1.png") - img("242679-output2.png")).mean(), abs=1e-6)
    assert final["overall"]["cells"]["L1"]["value"] == pytest.approx(turn2)
    assert (tmp_path / "out" / "edits" / "identity_edit" / "step2" / "manifest.jsonl").is_file()


def test_edits_may_name_one_models_folder(tmp_path):
    from editlens.bench.registry import get
    from editlens.runner.bench import locate

    b = get("gedit")
    items = b.read(F.gedit(tmp_path / "gedit"))
    F.gedit_outputs(tmp_path / "edits", "mine", ["k1", "k2"])
    one = locate(b, items, tmp_path / "edits" / "mine")  # holds fullset/..., not <model>/ folders
    assert one.models == ["mine"] and len(one.samples) == 2 and len(one.skipped) == 2
    both = locate(b, items, tmp_path / "edits")
    assert both.models == ["mine"] and [s.id for s in both.samples] == [s.id for s in one.samples]


def test_a_benchmark_not_downloaded_says_how_to_get_it(tmp_path):
    from editlens.errors import InputError
    from editlens.runner.bench import run_benchmark

    with pytest.raises(InputError, match=r"Download GEdit-Bench first: hf download stepfun-ai/GEdit-Bench"):
        run_benchmark("gedit", tmp_path / "nowhere", tmp_path / "out", edits=tmp_path)


def test_edit_with_bench_makes_a_benchmarks_edits_that_bench_run_then_reuses(tmp_path):
    """`editlens edit DATA --bench NAME`: the cases' edits, stage by stage (a multi-turn case is made from the
    editor's own earlier turn); `bench run --editor` with --out O finds them in O/edits/<editor> and makes none."""
    from editlens.bench.registry import get
    from editlens.runner.bench import generate

    data = F.magicbrush_test(tmp_path)
    spec = "callable:editlens.editors.callable_editor:identity_edit"
    folder = tmp_path / "out" / "edits" / "identity_edit"
    res = runner.invoke(app, ["edit", str(data), "--bench", "magicbrush-multiturn", "--editor", spec,
                              "--out", str(folder), "--no-progress"])
    assert res.exit_code == 0, res.output
    items = get("magicbrush-multiturn").read(data)
    assert f"MagicBrush (multi-turn): {len(items)} of {len(items)} cases made" in res.output
    logs = sorted(folder.glob("step*/generations.jsonl"))
    assert len(logs) >= 2
    before = [p.read_text() for p in logs]
    located, _ = generate(items, [spec], tmp_path / "out", progress=False)
    assert [p.read_text() for p in logs] == before  # nothing generated again
    assert len(located.samples) == len(items) and not located.skipped
    bad = runner.invoke(app, ["edit", str(data), "--bench", "magicbrush-multiturn", "--editor", spec,
                              "--out", str(tmp_path / "o2"), "--columns", "source=x"])
    assert bad.exit_code == 2 and "--columns does not go with --bench" in bad.output
    missing = runner.invoke(app, ["edit", str(tmp_path / "nowhere"), "--bench", "gedit", "--editor", spec,
                                  "--out", str(tmp_path / "o3")])
    assert missing.exit_code == 2 and "Download GEdit-Bench first" in missing.output


def test_a_metric_suite_compares_models_lower_first_where_the_metric_is_better_lower():
    from editlens.bench.registry import get
    from editlens.bench.table import comparison
    from editlens.runner.bench import _lower_is_better

    lower = _lower_is_better(get("magicbrush"))
    assert set(lower) == {"L1", "L2"}

    def model(l1, clip):  # type: ignore[no-untyped-def]
        return {"sections": [{"name": "turns", "figures": ["L1", "CLIP-I"], "overall": {"cells": {
            "L1": {"value": l1, "n": 5}, "CLIP-I": {"value": clip, "n": 5}}}}]}

    comp = comparison({"models": {"a": model(0.10, 0.80), "b": model(0.05, 0.70), "c": model(0.05, 0.90)}},
                      {"figure": "L1"}, lower)
    assert comp["ranked_by"]["order"] == "lower first"
    assert [r["model"] for r in comp["rows"]][2] == "a"  # b and c tie on L1, a is worst
    assert comp["best"] == {"turns / CLIP-I": "c"}  # the L1 tie names no best
    assert comparison({"models": {"a": model(0.1, 0.8)}})["ranked_by"] is None
    nothing = comparison({"models": {"a": model(None, None), "b": model(None, None)}}, {"figure": "L1"}, lower)
    assert nothing["ranking"] == "not ranked: no model has a value for turns L1" and nothing["best"] == {}
    assert [r["rank"] for r in nothing["rows"]] == [None, None]


def interrupting_edit(image, instruction, *, seed):  # type: ignore[no-untyped-def]
    """An editor during whose first image the user presses Ctrl-C."""
    import os
    import signal

    if not getattr(interrupting_edit, "pressed", False):
        interrupting_edit.pressed = True  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGINT)
    return image


def test_ctrl_c_while_making_the_edits_keeps_them_judges_nothing_and_exits_130(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    out = tmp_path / "out"
    args = ["bench", "run", "gedit", "--data", str(data), "--editor", "callable:test_bench_run:interrupting_edit",
            "--editor", "callable:editlens.editors.callable_editor:identity_edit", "--out", str(out),
            "--vlm", "http://127.0.0.1:9/v1", "--no-report", "--no-progress"]
    res = runner.invoke(app, args)
    assert res.exit_code == 130, res.output
    assert "stopped while making the edits (1 made and kept; nothing judged yet)" in res.output
    made = out / "edits" / "interrupting_edit" / "generations.jsonl"
    assert made.is_file() and len(made.read_text().splitlines()) == 1  # the image in flight was finished
    assert not (out / "edits" / "identity_edit").exists()  # the second editor never started
    assert not (out / "run").exists() and not (out / "table.json").exists()


def test_an_editor_given_one_of_several_inputs_is_said_and_recorded(tmp_path):
    """KRIS-Bench's composition and temporal cases have several inputs; an editor takes one: the generation
    says so and each such row records how many it was given."""
    data = F.kris(tmp_path)
    out = tmp_path / "edits"
    res = runner.invoke(app, ["edit", str(data), "--bench", "kris", "--editor",
                              "callable:editlens.editors.callable_editor:identity_edit", "--out", str(out),
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    assert ("note: 2 case(s) have several input images (multi-element_composition, temporal_prediction); the "
            "editor was given the first of each") in res.output
    rows = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    several = {r["edit_id"]: (r["inputs_given"], r["inputs"]) for r in rows if "inputs_given" in r}
    assert sorted(k.split("/")[0] for k in several) == ["multi-element_composition", "temporal_prediction"]
    assert all(given == 1 and inputs >= 2 for given, inputs in several.values())


def test_an_output_matching_no_case_is_said_not_dropped_silently(tmp_path):
    from editlens.bench.registry import get
    from editlens.runner.bench import locate

    b = get("gedit")
    items = b.read(F.gedit(tmp_path / "gedit"))
    F.gedit_outputs(tmp_path / "edits", "m", ["k1", "k2"])
    F.save(tmp_path / "edits" / "m" / "fullset" / "background_change" / "en" / "k1_typo.png", F.png(5))
    F.save(tmp_path / "edits" / "m" / "notes.txt", b"not an output")
    got = locate(b, items, tmp_path / "edits")
    assert len(got.samples) == 2
    (note,) = got.notes
    assert note.startswith("m: 1 image(s) in ") and "match none of the 4 cases read and are not scored" in note
    assert "fullset/background_change/en/k1_typo.png" in note and "notes.txt" not in note


def test_unreadable_outputs_exit_2_saying_a_rerun_cannot_fix_them(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "m", ["k1", "k2"])
    bad = next((edits / "m").rglob("k2.png"))
    bad.write_bytes(b"\x89PNG\r\n\x1a\n but not really")  # corrupt: no request can fix it
    with ScoringServer().running() as url:
        res = runner.invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(edits), "--out",
                                  str(tmp_path / "out"), "--vlm", url, "--cache", "none", "--n-boot", "20",
                                  "--no-report"])
    assert res.exit_code == 2, res.output
    assert "1 output(s) cannot be read as images" in res.output and "m/background_change/en/k2" in res.output
    assert "A rerun cannot fix them" in res.output and "lost judge requests" not in res.output


def test_outputs_of_another_aspect_are_noted(tmp_path):
    from editlens.bench.registry import get
    from editlens.runner.bench import locate, shape_notes

    b = get("gedit")
    items = b.read(F.gedit(tmp_path / "gedit"))  # 32 x 24 inputs
    F.gedit_outputs(tmp_path / "edits", "m", ["k1", "k2"])
    F.save(next((tmp_path / "edits" / "m").rglob("k2.png")), F.png(3, (13, 500)))
    (note,) = shape_notes(locate(b, items, tmp_path / "edits"))
    assert note.startswith("m: 1 output(s) have another aspect ratio than their source (e.g. background_change/en/k2: "
                           "aspect ratio 0.026 from 1.333 (13x500 from a 32x24 source))")
