"""KRIS-Bench asked per category as its release's judging scripts ask: which
images each call shows, in which order, after which captions (ours by default,
the clone's with --prompts-from), on files built in the published layout
(tests/bench_files.py), through the judge's built requests and end to end."""

from __future__ import annotations

import base64
import io
import json

import bench_files as F
import numpy as np
import pytest
from fake_openai import FakeServer
from PIL import Image
from typer.testing import CliRunner

from editlens.backends.types import Generation
from editlens.bench.judge import BenchJudge
from editlens.bench.kris import scale100
from editlens.bench.prompts import load_prompts
from editlens.bench.registry import get
from editlens.cli.main import app
from editlens.core.images import load_image
from editlens.core.types import EditSample
from editlens.errors import InputError


class Recorder:
    """A judge backend that keeps every request and answers nothing readable (the requests are the point)."""

    def __init__(self):
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        return [Generation("no scores here") for _ in requests]


def _asked(tmp_path, clone=None):
    """{category: [[part, ...] per question]}: each request's text and images, images named by their file."""
    b = get("kris")
    data = F.kris(tmp_path / "data")
    edits = F.kris_outputs(tmp_path / "edits", "m", data)
    items = b.read(data)
    files = [(p.name, load_image(p)[0]) for p in data.rglob("*.jpg")] + [("edited", load_image(p)[0])
                                                                         for p in edits.rglob("*.jpg")]
    # decoded images (--images editlens) so each can be named by its pixels; what the release sends is
    # tested in test_bench_release_reading.py
    judge = BenchJudge(b, load_prompts(b, clone), {it.id: it for it in items}, vlm="http://127.0.0.1:9/v1",
                       images="editlens")
    judge._backend = rec = Recorder()
    asked = {}
    for it in items:
        edited = edits / "m" / it.category / f"{it.key}.jpg"
        before = len(rec.requests)
        judge.compute([EditSample(it.id, it.source, str(edited), it.instruction, reference=it.reference).load()])
        named = []
        for req in rec.requests[before:]:
            (msg,) = req.messages
            named.append([p if isinstance(p, str) else
                          "<" + next(n for n, a in files if a.shape == p.shape and np.array_equal(a, p)) + ">"
                          for p in msg.parts])
        asked[it.category] = named
    return asked, judge


def test_each_category_shows_the_images_of_its_release_script_in_order_after_our_captions(tmp_path):
    asked, judge = _asked(tmp_path)
    vc, if_, vq = asked["count_change"]
    assert vc[1:] == if_[1:] == ["Original picture:", "<1.jpg>", "Edited picture:", "<edited>"]
    assert vq[1:] == ["Edited picture:", "<edited>"]  # quality: the edited image alone
    assert "Add one more apple." in vc[0] and "Add one more apple." in if_[0]
    bio = asked["biology"]
    assert len(bio) == 3 and "turn yellow or red" in bio[1][0]  # instruction and knowledge in one call
    view_if = asked["viewpoint_change"][1]
    assert view_if[1:] == ["Original picture:", "<9.jpg>", "Edited picture:", "<edited>",
                           "Ground truth (the requested view):", "<9_gt.jpg>"]
    assert asked["viewpoint_change"][0][1:] == ["Original picture:", "<9.jpg>", "Edited picture:", "<edited>"]
    multi_vc, multi_if, multi_vq = asked["multi-element_composition"]
    assert multi_if[1:] == multi_vc[1:] == ["Input 1:", "<3-1.jpg>", "Input 2:", "<3-2.jpg>", "Input 3:", "<3-3.jpg>",
                                            "Composed picture:", "<edited>"]
    assert multi_vq[1:] == ["Picture to judge:", "<edited>"]
    t_vc, t_if, t_vq = asked["temporal_prediction"]
    # frames 1, 2 and 4 given: the edit is frame 3, shown between them
    assert t_vc[1:] == t_if[1:] == ["Frame 1, real:", "<5-1.jpg>", "Frame 2, real:", "<5-2.jpg>",
                                    "Frame 3, generated:", "<edited>", "Frame 4, real:", "<5-4.jpg>"]
    assert "frame 3" in t_vc[0] and t_vq[1:] == ["Picture to judge:", "<edited>"]
    assert judge.images_per_prompt == 4  # the engine check asks room for the multi-image calls


def test_a_clones_prompts_and_captions_are_used_verbatim(tmp_path):
    asked, _ = _asked(tmp_path, F.kris_clone(tmp_path / "Kris_Bench"))
    vc, if_, vq = asked["count_change"]
    assert [vc[0], vc[1], vc[3]] == ["P-consist of Add one more apple.", "C-orig:", "C-edit:"]
    assert if_[0] == "P-instruction_following of Add one more apple." and vq[:2] == ["P-quality of {instruct} {{x}}", "C-edit:"]
    assert asked["biology"][1][:2] == ["P-dual_evaluation of Show this leaf in autumn. as Leaves lose chlorophyll "
                                       "and turn yellow or red.", "K-orig:"]
    view_if = asked["viewpoint_change"][1]
    assert view_if[0] == "P-view_instruction_following of Show it from above." and view_if[5:] == ["C-truth {x}:",
                                                                                                     "<9_gt.jpg>"]
    multi_if = asked["multi-element_composition"][1]
    assert [p for p in multi_if if not p.startswith("<")] == [
        "P-instruction_multi of Put the cat on the sofa.", "M-ref 1:", "M-ref 2:", "M-ref 3:", "M-pred:"]
    assert asked["multi-element_composition"][2][1] == "M-alone:"
    t_vc = asked["temporal_prediction"][0]
    assert t_vc[0] == "P-consist_temporal of Show the missing moment. at 3 {x}"  # as str.format(N=3) would fill it
    assert [p for p in t_vc[1:] if not p.startswith("<")] == ["T-frame 1 <T-ref>:", "T-frame 2 <T-ref>:",
                                                              "T-frame 3 <T-gen>:", "T-frame 4 <T-ref>:"]


def test_a_missing_ground_truth_or_unnumbered_frame_is_an_error_naming_the_file_and_field(tmp_path):
    b = get("kris")
    with pytest.raises(InputError, match=r"viewpoint_change/annotation.json key '9': 'gt_img' is missing"):
        b.read(F.kris(tmp_path / "a", viewpoint_change="gt_img"))
    data = F.kris(tmp_path / "b")
    (data / "viewpoint_change" / "9_gt.jpg").unlink()
    with pytest.raises(InputError, match=r"annotation.json key '9': 'gt_img' '9_gt.jpg' not found"):
        b.read(data)
    data = F.kris(tmp_path / "c")
    ann = data / "temporal_prediction" / "annotation.json"
    ann.write_text(ann.read_text().replace('"5-4.jpg"', '"last.jpg"'))
    (data / "temporal_prediction" / "5-4.jpg").rename(data / "temporal_prediction" / "last.jpg")
    with pytest.raises(InputError, match=r"temporal_prediction/annotation.json key '5': 'ori_img' 'last.jpg' has no"):
        b.read(data)
    data = F.kris(tmp_path / "d")
    ann = data / "count_change" / "annotation.json"
    ann.write_text(ann.read_text().replace('"1.jpg"', '["1.jpg", "1.jpg"]'))
    with pytest.raises(InputError, match=r"count_change/annotation.json key '1': 'ori_img' lists 2 images"):
        b.read(data)


def test_a_clone_without_the_judging_scripts_or_with_other_captions_is_refused(tmp_path):
    b = get("kris")
    clone = F.kris_clone(tmp_path / "Kris_Bench")
    # the prompts module itself may be named: the scripts are found at the clone's root above it
    assert load_prompts(b, clone / "utils" / "prompts.py").texts == load_prompts(b, clone).texts
    (clone / "metrics_view_change.py").unlink()
    with pytest.raises(InputError, match=r"metrics_view_change.py not found"):
        load_prompts(b, clone)
    clone = F.kris_clone(tmp_path / "other")
    f = clone / "metrics_multi_element.py"
    f.write_text(f.read_text().replace('"M-pred:"', "label"))
    with pytest.raises(InputError, match=r"metrics_multi_element.py: evaluate_multi_element_with_gpt\(\) writes 1 image "
                                         r"caption\(s\); the release's has 2"):
        load_prompts(b, clone)


class KeyedServer(FakeServer):
    """Answers every question with the release's JSON keys: consistency 4, instruction 3, knowledge 2, quality 5."""

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        return '{"consistency_score": 4, "instruction_score": 3, "knowledge_score": 2, "quality_score": 5}'


def test_bench_run_kris_end_to_end_with_the_clone(tmp_path):
    data = F.kris(tmp_path / "data")
    edits = F.kris_outputs(tmp_path / "edits", "m", data)
    clone = F.kris_clone(tmp_path / "Kris_Bench")
    fake = KeyedServer()
    with fake.running() as url:
        args = ["bench", "run", "kris", "--data", str(data), "--edits", str(edits), "--out", str(tmp_path / "out"),
                "--vlm", url, "--prompts-from", str(clone), "--cache", "none", "--n-boot", "20"]
        est = CliRunner().invoke(app, args + ["--estimate"])
        assert est.exit_code == 0 and "15 judge calls for 5 cases x 1 model(s)" in est.output, est.output
        res = CliRunner().invoke(app, args + ["--json", "--no-report"])
    assert res.exit_code == 0, res.output
    t = json.loads(res.output)
    assert t["models"]["m"]["counts"]["scored"] == 5 and t["prompts"]["from_clone"] is True
    cells = {r["row"]: r["cells"] for r in t["models"]["m"]["sections"][0]["rows"]}
    assert cells["temporal_prediction"]["VC"]["value"] == scale100(4) and cells["biology"]["KP"]["value"] == scale100(2)
    assert cells["viewpoint_change"]["IF"]["value"] == scale100(3) and cells["viewpoint_change"]["KP"]["value"] is None
    # what went over the wire: the temporal consistency call's texts and images, in order
    contents = [b["messages"][0]["content"] for b in fake.bodies]
    temporal = next(c for c in contents if c[0].get("text", "").startswith("P-consist_temporal"))
    assert [p["type"] for p in temporal] == ["text"] + ["text", "image_url"] * 4
    assert [p["text"] for p in temporal if p["type"] == "text"][1:] == [
        "T-frame 1 <T-ref>:", "T-frame 2 <T-ref>:", "T-frame 3 <T-gen>:", "T-frame 4 <T-ref>:"]
    asks = [c for c in contents if c[0]["type"] == "text"]  # the rest: the engine check's probe
    assert len(asks) == 15  # three calls per case
    assert all(sum(p["type"] == "image_url" for p in c) == 4 for c in contents if c not in asks)


class ListServer(FakeServer):
    """Answers our wording's questions: [3, 2] where two scores are asked, else [4]."""

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        two = "[instruction, knowledge]" in json.dumps(body["messages"])
        return '{"reasoning": "ok", "score": [3, 2]}' if two else '{"reasoning": "ok", "score": [4]}'


def test_bench_run_kris_from_python_with_our_wording(tmp_path):
    from editlens.runner.bench import run_benchmark

    data = F.kris(tmp_path / "data")
    edits = F.kris_outputs(tmp_path / "edits", "m", data)
    F.save(edits / "m" / "count_change" / "1.jpg", F.png(5, size=(40, 30), fmt="JPEG"))  # the sources are 32x24
    fake = ListServer()
    with fake.running() as url:
        t = run_benchmark("kris", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=20,
                          progress=False)
    assert t["exit"] == 0 and t["models"]["m"]["counts"]["scored"] == 5 and t["prompts"]["from_clone"] is False
    cells = {r["row"]: r["cells"] for r in t["models"]["m"]["sections"][0]["rows"]}
    assert cells["biology"]["IF"]["value"] == scale100(3) and cells["biology"]["KP"]["value"] == scale100(2)
    assert cells["multi-element_composition"]["IF"]["value"] == scale100(4)
    multi = next(b["messages"][0]["content"] for b in fake.bodies
                 if "composed from them" in b["messages"][0]["content"][0].get("text", ""))
    assert [p["type"] for p in multi] == ["text"] + ["text", "image_url"] * 4
    sizes = {Image.open(io.BytesIO(base64.b64decode(p["image_url"]["url"].split(",", 1)[1]))).size
             for b in fake.bodies for p in b["messages"][0]["content"] if p["type"] == "image_url"}
    assert (40, 30) in sizes  # the judge sees the edit at its own size, as the release sends it
    rows = [json.loads(line) for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    temporal = next(r for r in rows if r["category"] == "temporal_prediction")
    assert temporal["sources"] == 3 and temporal["frames"] == [1, 2, 4] and temporal["edited_frame"] == 3


def test_a_question_showing_a_source_the_case_lacks_is_refused():
    from editlens.bench.base import BenchItem, Question
    from editlens.bench.judge import question_images

    arr = np.zeros((4, 4, 3), dtype=np.uint8)
    sample = EditSample("c", arr, arr, "do it").load()
    item = BenchItem("c", "c", "do it", arr, "x", sources=(arr, arr + 1))
    got = question_images(Question("q", "t", ("source:1", "source:0", "edited"), ("S",)), sample, item)
    assert got["source:1"][0, 0, 0] == 1 and got["source:0"] is sample.source
    with pytest.raises(ValueError, match=r"shows source:2, but the case has 2 source image\(s\)"):
        question_images(Question("q", "t", ("source:2",), ("S",)), sample, item)
    with pytest.raises(ValueError, match=r"shows an image the item lacks \(reference\)"):
        question_images(Question("q", "t", ("reference",), ("S",)), sample, item)
    with pytest.raises(ValueError, match="2 captions for 1 images"):
        Question("q", "t", ("edited",), ("S",), captions=("a", "b"))


@pytest.mark.slow  # builds a tiny Qwen2.5-VL and generates on CPU (~5 s)
def test_bench_run_kris_with_a_local_tiny_judge_takes_every_image(tmp_path):
    from editlens.runner.bench import run_benchmark
    from editlens.testing import tiny_reward as TR

    vlm = TR.program_answer(TR.build_qwen_vl(tmp_path / "vlm", "qwen2_5_vl"), ['{"score": [4]}'])
    data = F.kris(tmp_path / "data")
    edits = F.kris_outputs(tmp_path / "edits", "m", data)
    t = run_benchmark("kris", data, tmp_path / "out", edits=edits, vlm=str(vlm), device="cpu", max_new_tokens=8,
                      cache=False, n_boot=20, progress=False)
    rows = {r["category"]: r for r in map(json.loads, (tmp_path / "out" / "items.jsonl").read_text().splitlines())}
    # the multi-image calls (three inputs and the edit; four frames) went through the model and were read
    assert rows["multi-element_composition"]["scores"] == {"VC": 75.0, "IF": 75.0, "VQ": 75.0, "overall": 75.0}
    assert rows["temporal_prediction"]["status"] == rows["viewpoint_change"]["status"] == "scored"
    # one score where the knowledge call asks two: those two are missing (never a guess); the dimensions the
    # other calls read are kept, as the release keeps them
    assert rows["biology"]["status"] == "scored" and "IF_KP" in rows["biology"]["reason"]
    assert rows["biology"]["scores"] == {"VC": 75.0, "VQ": 75.0, "overall": 75.0}
    assert t["models"]["m"]["counts"]["scored"] == 5
    assert t["models"]["m"]["counts"]["scored_without"] == {"IF": 1, "KP": 1}  # biology's, counted
