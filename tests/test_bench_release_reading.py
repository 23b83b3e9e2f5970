"""Benchmarks read and sent as their releases do (issue 39): the two answer policies
(``--answers release|strict``) on the owners' odd answer forms, the images each release sends
(bytes, format, size), RISEBench's reasoning_img prompt and its two release versions, KRIS keeping
readable dimensions, ``--metrics`` and ``--no-probe``. No clone: the fake judge is an OpenAI-compatible
server on 127.0.0.1 and every request it gets is inspected."""

from __future__ import annotations

import base64
import io
import json
import zlib

import bench_files as F
import pytest
from fake_openai import FakeServer
from PIL import Image

from editlens.backends.types import Generation
from editlens.bench.base import Question
from editlens.bench.judge import BenchJudge
from editlens.bench.prompts import PromptSet
from editlens.bench.registry import get
from editlens.runner.bench import run_benchmark


def _images(body):
    """(mime, bytes, detail) of every image a request sent, in order."""
    out = []
    for p in body["messages"][0]["content"]:
        if p["type"] == "image_url":
            head, data = p["image_url"]["url"].split(",", 1)
            out.append((head[5:].split(";")[0], base64.b64decode(data), p["image_url"].get("detail")))
    return out


def _text(body):
    return "".join(p.get("text", "") for p in body["messages"][0]["content"])


class Answers(FakeServer):
    """Answers each request with the text the test maps to a marker found in its prompt."""

    def __init__(self, answers, default):
        super().__init__()
        self.answers, self.default = answers, default

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        text = json.dumps(body.get("messages", ""))
        return next((a for k, a in self.answers.items() if k in text), self.default)


# ------------------------------------------------------------------------------------------- answer policies

def test_imgedit_bold_and_two_line_answers_under_both_policies():
    b = get("imgedit")
    q = Question("judge", "x", ("source", "edited"), ("score1", "score2", "score3"))
    bold = "Brief reasoning: ok\n**Prompt Compliance:** 4\n**Visual Naturalness:** 5\n**Physical Integrity:** 3"
    two = "Prompt Compliance: 4\nVisual Naturalness: 5"
    # release: split(': ') finds no number in bold lines (the edit is left out); two lines are averaged
    assert b.read_answer(q, bold, True, "release").values is None
    assert b.read_answer(q, two, True, "release").values == {"score1": 4.0, "score2": 5.0}
    assert b.item_scores(None, b.read_answer(q, two, True, "release").values) == {"score": 4.5}  # type: ignore[arg-type]
    # strict: exactly three lines, markdown bold read
    assert b.read_answer(q, bold, True, "strict").values == {"score1": 4.0, "score2": 5.0, "score3": 3.0}
    assert b.read_answer(q, two, True, "strict").values is None
    uge = get("imgedit-uge")
    qu = Question("judge", "x", ("source", "edited"), ("score",))
    assert uge.read_answer(qu, "Brief reasoning: fine\n**Score:** 4", True, "release").values is None
    assert uge.read_answer(qu, "Brief reasoning: fine\n**Score:** 4", True, "strict").values == {"score": 4.0}
    assert uge.read_answer(qu, "Score: 4\nScore: 3", True, "release").values == {"score": 4.0, "score2": 3.0}
    assert uge.read_answer(qu, "Score: 4\nScore: 3", True, "strict").values is None


def test_gedit_release_reads_delimited_fenced_and_bare_lists_and_counts_what_it_would_guess():
    b = get("gedit")
    q = Question("SC", "x", ("source", "edited"), ("SC_success", "SC_overediting"), low=0, high=10)
    cases = {'||V^=^V||\n{"score": [7, 3], "reasoning": "ok"}\n||V^=^V||': {"SC_success": 7.0, "SC_overediting": 3.0},
             '```json\n{"score": [6, 8], "reasoning": "ok"}\n```': {"SC_success": 6.0, "SC_overediting": 8.0},
             "[5, 9]": {"SC_success": 5.0, "SC_overediting": 9.0},
             '{"score": 4, "reasoning": "one"}': {"SC_success": 4.0, "SC_overediting": 4.0}}  # one score: its min
    for text, want in cases.items():
        assert b.read_answer(q, text, True, "release").values == want, text
    prose = b.read_answer(q, "The edit looks fine to me.", True, "release")
    assert prose.values is None and prose.invented  # the release would guess random.randint(0, 10)
    assert b.read_answer(q, '{"score": 4, "reasoning": "one"}', True, "strict").values is None


def test_kris_release_fallbacks_and_the_knowledge_scripts_own_reader():
    b = get("kris")
    vq = Question("VQ", "x", ("edited",), ("VQ",), reader="common")
    assert b.read_answer(vq, "I would rate this 4/5 for quality.", True, "release").values == {"VQ": 4.0}
    assert b.read_answer(vq, "I would rate this 4/5 for quality.", True, "strict").values is None
    assert b.read_answer(vq, '```json\n{"quality_score": 3, "reasoning": "ok"}\n```', True, "release").values == {"VQ": 3.0}
    dual = Question("IF_KP", "x", ("source", "edited"), ("IF", "KP"), reader="knowledge")
    # the knowledge script's JSON with one key null: that key is not looked for further
    got = b.read_answer(dual, '{"instruction_score": 4, "knowledge_score": null}', True, "release")
    assert got.values == {"IF": 4.0}
    # temporal (and multi-element): no '<name> score' pattern, so 'N/5' wins over it
    t = Question("VC", "x", ("edited",), ("VC",), reader="temporal")
    m = Question("VC", "x", ("edited",), ("VC",), reader="multi")
    assert b.read_answer(m, "consistency score: 2, overall 5/5", True, "release").values == {"VC": 5.0}
    c = Question("VC", "x", ("edited",), ("VC",), reader="common")
    text = "consistency score: 2, overall 5/5"
    assert b.read_answer(t, text, True, "release").values == {"VC": 5.0}
    assert b.read_answer(c, text, True, "release").values == {"VC": 2.0}


def test_kris_keeps_each_readable_dimension_of_an_item(tmp_path):
    b = get("kris")
    items = {it.category: it for it in b.read(F.kris(tmp_path))}
    judge = BenchJudge(b, PromptSet(b.fallback_prompts(), False, "fallback"), {}, vlm="http://127.0.0.1:9/v1")
    it = items["biology"]
    qs = b.questions(it, judge.prompts)
    assert [q.name for q in qs] == ["VC", "IF_KP", "VQ"]
    s = judge._score(it, qs, [Generation('{"score": [5]}'), Generation("no idea"), Generation('{"score": [3]}')])
    assert s.status == "scored" and "IF_KP" in s.reason
    assert s.details["figures"] == {"VC": 100.0, "VQ": 50.0, "overall": 75.0}
    # the release's knowledge script: one answer holding instruction following but not knowledge
    clone = BenchJudge(b, PromptSet(b.fallback_prompts(), True, "clone"), {}, vlm="http://127.0.0.1:9/v1")
    half = clone._score(it, qs, [Generation('{"consistency_score": 5}'),
                                 Generation('{"instruction_score": 4, "knowledge_score": null}'),
                                 Generation("I would rate this 3/5")])
    assert half.status == "scored" and half.details["figures"] == {"VC": 100.0, "IF": 75.0, "VQ": 50.0,
                                                                   "overall": 75.0}
    assert "IF_KP: KP not read" in half.reason
    strict = half.details["by_policy"]["strict"]
    assert strict["figures"] == {"VC": 100.0, "overall": 100.0} and "VQ" in strict["reason"]
    none = judge._score(it, qs, [Generation("?"), Generation("?"), Generation("?")])
    assert none.status == "unscored" and none.value is None  # nothing read: missing, never zero


# -------------------------------------------------------------------------------------------- RISEBench

def _rise_clone(root):
    names = ["consist", "reasoning", "reasoning_w_input", "generation", "spatial_ref", "spatial_ref_img",
             "spatial_ref_w_input", "spatial_cons", "spatial_qual", "logical_cons", "logical_cons_ans",
             "logical_txt", "logical_img"]
    F.save(root / "utils.py", "".join(f'prompt_{n} = "P-{n}: {{instruct}} / {{reference}}"\n' for n in names).encode())
    return root


def _rise_data(root):
    root = F.rise(root)
    cases = json.loads((root / "data_total.json").read_text())
    cases.append({"index": "temporal_9", "category": "temporal_reasoning", "subtask": "Life Progression",
                  "instruction": "Show the tree in winter.", "image": "data/images/t9.png", "reference": "bare",
                  "reasoning_img": "data/images/t9_r.png"})
    F.save(root / "data/images/t9.png", F.png(9, (1000, 800)))  # larger than the release's 768 px
    F.save(root / "data/images/t9_r.png", F.png(19))
    (root / "data_total.json").write_text(json.dumps(cases))
    return root


def test_rise_reasoning_img_case_sends_the_input_prompt_with_input_and_output_jpeg_at_most_768(tmp_path):
    data = _rise_data(tmp_path / "rise")
    edits = tmp_path / "edits"
    for cat, idx in [("temporal_reasoning", "temporal_1"), ("causal_reasoning", "causal_2"),
                     ("logical_reasoning", "logic_3"), ("temporal_reasoning", "temporal_9")]:
        F.save(edits / "m" / "images" / cat / f"{idx}.png", F.png(zlib.crc32(idx.encode()), (40, 30)))
    fake = Answers({"P-reasoning_w_input": "Final Score: 5", "Show the tree": "**Final Score**: 5",
                    "Solve the maze": "Final Score: 1"}, "Reasoning... no final line")
    with fake.running() as url:
        t = run_benchmark("rise", data, tmp_path / "out", edits=edits, vlm=url, prompts_from=_rise_clone(tmp_path / "c"),
                          cache=False, n_boot=20, progress=False)
        asked = len(fake.bodies)
        strict = run_benchmark("rise", data, tmp_path / "out", edits=edits, vlm=url, prompts_from=tmp_path / "c",
                               cache=False, n_boot=20, progress=False, answers="strict")
        assert len(fake.bodies) == asked  # the stored answers are read again, nothing is asked twice
    rea = [b for b in fake.bodies if "P-reasoning_w_input: Show the tree in winter. / bare" in _text(b)]
    assert len(rea) == 1
    (src_mime, src, detail), (_, out, _) = _images(rea[0])
    assert src_mime == "image/jpeg" and detail == "high"
    assert Image.open(io.BytesIO(src)).format == "JPEG" and Image.open(io.BytesIO(src)).size == (768, 614)
    assert Image.open(io.BytesIO(out)).size == (40, 30)  # the edit at its own size (not the source's)
    # the other temporal case (no reasoning_img) is asked with the output only
    plain = [b for b in fake.bodies if "P-reasoning: Show this puppy" in _text(b)]
    assert len(plain) == 1 and len(_images(plain[0])) == 1
    # release: temporal_9 and the maze (0/1 answers 1: mapped to 5) have full marks; the two cases with
    # unreadable answers count as incomplete (0) in accuracy and have no weighted score
    assert t["answers"]["policy"] == "release" and t["release"]["commit"] == "ce8cba3"
    cells = t["models"]["m"]["sections"][0]["overall"]["cells"]
    assert (cells["accuracy"]["value"], cells["accuracy"]["n"], cells["score"]["n"]) == (0.5, 4, 2)
    # strict: unreadable cases are left out (missing, counted), not incomplete
    cells = strict["models"]["m"]["sections"][0]["overall"]["cells"]
    assert (cells["accuracy"]["value"], cells["accuracy"]["n"]) == (1.0, 2)
    assert strict["models"]["m"]["counts"]["unscored"] == 2


# ------------------------------------------------------------------------------------------ images as sent

def test_imgedit_sends_the_files_bytes_at_their_own_size_named_png(tmp_path):
    root = F.imgedit(tmp_path / "bench")
    clone = tmp_path / "ImgEdit"
    F.save(clone / "Benchmark" / "Basic" / "prompts.json",
           json.dumps({t: f"Judge {t}: <edit_prompt>" for t in get("imgedit").spec.categories}).encode())
    edits = tmp_path / "edits"
    for key in ("1082", "673", "12"):
        F.save(edits / "m" / f"{key}.png", F.png(int(key), (50, 20)))  # another size than the source
    fake = Answers({}, "Prompt Compliance: 4\nVisual Naturalness: 4\nPhysical Integrity: 4")
    with fake.running() as url:
        run_benchmark("imgedit", root, tmp_path / "out", edits=edits, vlm=url, prompts_from=clone, cache=False,
                      n_boot=20, progress=False)
        sent = {_text(b): _images(b) for b in fake.bodies}
        run_benchmark("imgedit", root, tmp_path / "out2", edits=edits, vlm=url, prompts_from=clone, cache=False,
                      n_boot=20, progress=False, images="editlens")
    (src_mime, src, _), (out_mime, out, _) = sent["Judge adjust: Make the shell smooth."]
    assert src == (root / "animal" / "000342021.jpg").read_bytes() and src_mime == "image/png"  # as the release
    assert out == (edits / "m" / "1082.png").read_bytes() and out_mime == "image/png"
    assert Image.open(io.BytesIO(out)).size == (50, 20)
    # --images editlens: decoded, PNG, the edit resized to the source's size
    last = _images(fake.bodies[-1])
    assert all(m == "image/png" for m, _, _ in last) and Image.open(io.BytesIO(last[1][1])).size == (32, 24)


def test_gedit_sends_jpeg_of_both_images_with_the_edit_resized_to_the_source(tmp_path):
    data = F.gedit(tmp_path / "gedit")
    edits = tmp_path / "edits"
    F.save(edits / "m" / "fullset" / "background_change" / "en" / "k1.png", F.png(7, (64, 40)))
    fake = Answers({}, '{"score": [8, 7], "reasoning": "ok"}')
    with fake.running() as url:
        run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=20, progress=False)
    sc = next(b for b in fake.bodies if len(_images(b)) == 2 and "YES or NO" not in _text(b))
    (m1, src, _), (m2, out, _) = _images(sc)
    assert m1 == m2 == "image/jpeg"
    src_img, out_img = Image.open(io.BytesIO(src)), Image.open(io.BytesIO(out))
    assert src_img.format == out_img.format == "JPEG" and out_img.size == src_img.size
    # the bytes are PIL's JPEG at its default quality of the edit resized (PIL's default filter) to the source
    expect = io.BytesIO()
    Image.open(edits / "m" / "fullset" / "background_change" / "en" / "k1.png").convert("RGB").resize(
        src_img.size).save(expect, format="JPEG")
    assert out == expect.getvalue()


def test_kris_sends_files_and_the_temporal_script_jpeg_at_quality_85(tmp_path):
    data = F.kris(tmp_path / "data")
    edits = F.kris_outputs(tmp_path / "edits", "m", data)
    fake = Answers({}, '{"consistency_score": 4, "instruction_score": 4, "knowledge_score": 4, "quality_score": 4}')
    with fake.running() as url:
        run_benchmark("kris", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=20, progress=False,
                      prompts_from=F.kris_clone(tmp_path / "Kris_Bench"))
    plain = next(b for b in fake.bodies if "P-consist of Add one more apple." in _text(b))
    (mime, src, _), (_, out, _) = _images(plain)
    assert mime == "image/jpeg" and src == (data / "count_change" / "1.jpg").read_bytes()
    assert out == (edits / "m" / "count_change" / "1.jpg").read_bytes()
    temporal = next(b for b in fake.bodies if "P-consist_temporal" in _text(b))
    first = _images(temporal)[0][1]
    expect = io.BytesIO()
    Image.open(data / "temporal_prediction" / "5-1.jpg").convert("RGB").save(expect, format="JPEG", quality=85)
    assert first == expect.getvalue()


# ---------------------------------------------------------------------------------------- --metrics, probe

def test_metrics_runs_the_model_free_part_of_a_suite_without_clip_or_dino(tmp_path):
    data = F.magicbrush_test(tmp_path)
    edits = tmp_path / "edits"
    F.save(edits / "ed" / "242679_1.png", F.png(50))
    t = run_benchmark("magicbrush", data, tmp_path / "out", edits=edits, metrics=["L1", "l2_ref"], n_boot=20,
                      progress=False, device="cpu")
    sec = t["models"]["ed"]["sections"][0]
    assert sec["figures"] == ["L1", "L2"] and sec["rows"][0]["cells"]["L1"]["value"] > 0
    from editlens.errors import InputError

    with pytest.raises(InputError, match="computes"):
        run_benchmark("magicbrush", data, tmp_path / "o2", edits=edits, metrics=["FID"], progress=False)
    from editlens.errors import ModelUnavailableError

    # without --metrics, the missing CLIP weights stop the run with the way out named
    with pytest.raises(ModelUnavailableError, match="--metrics L1,L2"):
        run_benchmark("magicbrush", data, tmp_path / "o3", edits=edits, progress=False, device="cpu",
                      metric_models={"clip": str(tmp_path / "no-clip"), "dino": str(tmp_path / "no-dino")})


def test_the_start_up_probe_is_counted_in_the_estimate_and_skipped_with_no_probe(tmp_path):
    data = F.gedit(tmp_path / "gedit")
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "m", ["k1"])
    fake = Answers({}, '{"score": [8, 7], "reasoning": "ok"}')
    with fake.running() as url:
        est = run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, estimate_only=True)
        assert est["probe_calls"] == 1 and est["calls_total"] == est["judge_calls"] + 1
        assert run_benchmark("gedit", data, tmp_path / "o", edits=edits, vlm=url, estimate_only=True,
                             probe=False)["probe_calls"] == 0
        run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=20, progress=False,
                      probe=False)
    probes = [b for b in fake.bodies if "YES or NO" in _text(b)]
    assert probes == [] and len(fake.bodies) == 2  # SC and PQ of the one output, nothing else


def test_gedit_with_the_clones_prompts_counts_what_the_release_would_guess_and_names_the_policy(tmp_path):
    clone = tmp_path / "Step1X-Edit"
    names = ("_context_no_delimit", "_prompts_0shot_two_image_edit_rule", "_prompts_0shot_tie_rule_SC",
             "_prompts_0shot_rule_PQ")
    F.save(clone / "GEdit-Bench" / "viescore" / "vie_prompts.py",
           "".join(f'{n} = "{n} <instruction>"\n' for n in names).encode())
    data = F.gedit(tmp_path / "gedit", instructions={"k1": "edit k1 fenced", "k2": "edit k2 prose"})
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "m", ["k1", "k2"])
    fake = Answers({"fenced": '```json\n{"score": [6, 9], "reasoning": "ok"}\n```',
                    "prose": "I think the edit is quite good overall."}, '||V^=^V||{"score": [8, 7]}||V^=^V||')
    with fake.running() as url:
        t = run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, prompts_from=clone, cache=False,
                          n_boot=20, progress=False)
    a = t["answers"]
    assert a["policy"] == "release" and a["release_would_invent"] == 1 and a["read_differently"] == 0
    assert t["models"]["m"]["counts"]["unscored"] == 1  # the prose answer: never a guessed score
    md = (tmp_path / "out" / "table.md").read_text()
    assert "Answers read: release" in md and "replaced with a random score" in md
    assert "Images sent: as=release, encoding=jpeg" in md
    assert "Answers read: release" in (tmp_path / "out" / "table.tex").read_text()
    items = [json.loads(x) for x in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    k2 = next(r for r in items if r["item"].endswith("k2"))
    assert k2["answers"]["release"]["invented"] == 1 and "prose" not in k2["raw_answers"]["SC"]


def test_rise_weighted_score_follows_the_releases_nan_quirk_and_an_unknown_release_is_refused(tmp_path):
    from editlens.errors import InputError

    b = get("rise")
    items = {it.id: it for it in b.read(F.rise(tmp_path / "rise"))}
    temporal, causal, logic = (items[k] for k in ("temporal_reasoning/temporal_1", "causal_reasoning/causal_2",
                                                  "logical_reasoning/logic_3"))
    # the data has a consistency_free column (causal_2), so the release scores temporal_1 (no value: NaN, true)
    # as consistency-free too: 0.2 VP + 0.8 R, not 0.3 AC + 0.5 R + 0.2 VP
    assert temporal.extra["consistency_free"] is False and temporal.extra["scored_as_consistency_free"] is True
    got = b.item_scores(temporal, {"AC": 1.0, "R": 4.0, "VP": 5.0})
    assert got["score"] == pytest.approx(0.2 * 5 + 0.8 * 4) and got["accuracy"] == 0.0
    assert b.item_scores(causal, {"R": 5.0, "VP": 5.0})["accuracy"] == 1.0
    assert b.item_scores(logic, {"AC": 5.0, "R": 1.0})["score"] == pytest.approx(max((0.3 * 5 + 0.7) / 2, 1))
    data = tmp_path / "rise"
    with pytest.raises(InputError, match="no release 'abc1234'"):
        run_benchmark("rise", data, tmp_path / "out", edits=tmp_path, vlm="http://127.0.0.1:9/v1", release="abc1234")


def test_the_cli_takes_metrics_answers_images_release_and_no_probe(tmp_path):
    from typer.testing import CliRunner

    from editlens.cli.main import app

    runner = CliRunner()
    data = F.magicbrush_test(tmp_path)
    edits = tmp_path / "edits"
    F.save(edits / "ed" / "242679_1.png", F.png(50))
    res = runner.invoke(app, ["bench", "run", "magicbrush", "--data", str(data), "--edits", str(edits), "--out",
                              str(tmp_path / "out"), "--metrics", "L1,L2", "--n-boot", "20", "--json", "--no-report"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["models"]["ed"]["sections"][0]["figures"] == ["L1", "L2"]
    gdata = F.gedit(tmp_path / "gedit")
    gedits = tmp_path / "gedits"
    F.gedit_outputs(gedits, "m", ["k1"])
    args = ["bench", "run", "gedit", "--data", str(gdata), "--edits", str(gedits), "--out", str(tmp_path / "g"),
            "--vlm", "http://127.0.0.1:9/v1", "--estimate"]
    est = runner.invoke(app, args)
    assert est.exit_code == 0 and "+ 1 start-up probe request (--no-probe skips it)" in est.output
    assert "probe" not in runner.invoke(app, args + ["--no-probe"]).output
    bad = runner.invoke(app, args + ["--answers", "lenient"])
    assert bad.exit_code != 0 and "--answers must be one of release, strict" in bad.output
    bad = runner.invoke(app, args + ["--images", "webp"])
    assert bad.exit_code != 0 and "--images must be one of release, editlens" in bad.output
