"""``editlens bench export --official`` and ``bench verify --clone``: a run's judge
answers written in the owners' own files (shapes and known values from tiny runs),
the refusal of a clone whose scoring files editlens was not checked against, and
verify's comparison and printing. The proof that verify's figures equal the
owners' is ``benchmarks/conformance.py`` run against the owners' real scripts
(docs/benchmarks-catalog.md), not a test: no owner code is in this repository."""

from __future__ import annotations

import csv
import json
import pickle
import re

import bench_files as F
import pytest
from fake_openai import FakeServer
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.errors import InputError
from editlens.runner.bench import run_benchmark
from editlens.runner.official import Figure, ItemRead, _differences, export_official, recognise, verify, verify_text

runner = CliRunner()


class Answers(FakeServer):
    """Answers by what the prompt asks: GEdit SC/PQ JSON, or one fixed text."""

    def __init__(self, text: str | None = None) -> None:
        super().__init__()
        self.broken = False
        self.text = text

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        if self.text is not None:
            return self.text
        sent = json.dumps(body.get("messages", ""))
        m = re.search(r"sc=(\d+),(\d+)", sent)
        if m:
            return json.dumps({"reasoning": "seen", "score": [int(m.group(1)), int(m.group(2))]})
        return '{"reasoning": "clean", "score": [9, 8]}'


def _gedit_run(tmp_path):
    data = F.gedit(tmp_path / "bench", instructions={"k1": "edit k1 sc=9,4", "k2": "edit k2 sc=8,8",
                                                     "k3": "edit k3 sc=3,7", "k4": "edit k4 sc=2,8"})
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "m", ["k1", "k2", "k3", "k4"])
    with Answers().running() as url:
        run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=10, progress=False)
    return tmp_path / "out"


def test_gedit_export_writes_the_releases_per_task_score_csvs_with_the_runs_values(tmp_path):
    out = _gedit_run(tmp_path)
    res = runner.invoke(app, ["bench", "export", str(out), "--official", str(tmp_path / "official"), "--json"])
    assert res.exit_code == 0, res.output
    folder = tmp_path / "official" / "m" / "gpt4o" / "eval_results_new"
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == 11 and "m_background_change_gpt_score.csv" in files  # every task type has its file
    with open(folder / "m_background_change_gpt_score.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # the columns test_gedit_score.py writes and calculate_statistics.py reads, in its order
    assert list(rows[0]) == ["source_image", "edited_image", "instruction", "sementics_score", "quality_score",
                             "intersection_exist", "instruction_language"]
    got = {(r["edited_image"].rsplit("/", 1)[-1], r["instruction_language"]): r for r in rows}
    k1 = got[("k1.png", "en")]
    assert (float(k1["sementics_score"]), float(k1["quality_score"]), k1["intersection_exist"]) == (4.0, 8.0, "True")
    assert got[("k2.png", "en")]["intersection_exist"] == "False"
    assert float(got[("k4.png", "cn")]["sementics_score"]) == 2.0
    assert k1["source_image"].endswith("/m/fullset/background_change/en/k1_SRCIMG.png")
    assert k1["instruction"] == "edit k1 sc=9,4"  # read again from the benchmark's files
    with open(folder / "m_color_alter_gpt_score.csv", newline="") as fh:
        assert [float(r["sementics_score"]) for r in csv.DictReader(fh)] == [3.0]
    assert "calculate_statistics.py" in json.loads(res.output)["how_to_run"]


def test_imgedit_export_writes_result_json_of_raw_answers_and_the_cases(tmp_path):
    root = F.imgedit(tmp_path / "bench")
    edits = tmp_path / "edits"
    for key in ("1082", "673", "12"):
        F.save(edits / "m" / f"{key}.png", F.png(int(key)))
    text = "Brief reasoning: ok.\nPrompt Compliance: 4\nVisual Naturalness: 5\nPhysical & Detail Integrity: 3"
    with Answers(text).running() as url:
        run_benchmark("imgedit", root, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=10, progress=False)
    files = export_official(tmp_path / "out", tmp_path / "official")["files"]
    assert sorted(files) == sorted([str(tmp_path / "official" / "m" / "result.json"),
                                    str(tmp_path / "official" / "basic_edit.json")])
    result = json.loads((tmp_path / "official" / "m" / "result.json").read_text())
    assert result == {"1082": text, "673": text, "12": text}  # basic_bench.py's {key: answer}
    cases = json.loads((tmp_path / "official" / "basic_edit.json").read_text())
    assert cases["1082"]["edit_type"] == "adjust" and cases["673"]["edit_type"] == "style"
    assert cases["1082"]["id"] == "animal/000342021.jpg"


def test_rise_export_writes_the_judge_file_gpt_eval_reads_and_the_cases_as_published(tmp_path):
    root = F.rise(tmp_path / "bench")
    edits = tmp_path / "edits"
    cases = json.loads((root / "data_total.json").read_text())
    for c in cases:
        F.save(edits / "m" / "images" / c["category"] / f"{c['index']}.png", F.png(len(c["index"])))
    with Answers('{"score": [5]}').running() as url:
        run_benchmark("rise", root, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=10, progress=False)
    export_official(tmp_path / "out", tmp_path / "official")
    with open(tmp_path / "official" / "m" / "m.pkl", "rb") as fh:
        judged = pickle.load(fh)
    assert set(judged) == {"temporal_1", "causal_2", "logic_3"}  # keyed by the data's own index
    assert judged["temporal_1"] == {"judge1": '{"score": [5]}', "judge2": '{"score": [5]}', "judge3": '{"score": [5]}'}
    assert judged["causal_2"]["judge1"] is None  # consistency-free: the release keeps None there
    assert "judge3" not in judged["logic_3"]  # logical: no quality call, so no judge3 (gpt_eval's branch)
    rows = json.loads((tmp_path / "official" / "m" / "data_total.json").read_text())
    assert rows == cases  # the published rows, consistency_free only where the data has it


def test_export_refuses_a_folder_that_is_not_a_run_and_a_benchmark_without_owner_files(tmp_path):
    res = runner.invoke(app, ["bench", "export", str(tmp_path), "--official", str(tmp_path / "o")])
    assert res.exit_code != 0 and "not a `editlens bench run` output folder (table.json is missing)" in res.output
    (tmp_path / "table.json").write_text(json.dumps({"benchmark": "imagenhub", "models": {}}))
    (tmp_path / "items.jsonl").write_text("")
    (tmp_path / "run").mkdir()
    with pytest.raises(InputError, match="imagenhub.*no owners' files"):
        export_official(tmp_path, tmp_path / "o")


def test_verify_refuses_a_clone_whose_scoring_files_it_does_not_know_naming_file_and_commit(tmp_path):
    out = _gedit_run(tmp_path)
    clone = tmp_path / "Step1X-Edit"
    clone.mkdir()
    with pytest.raises(InputError, match=r"GEdit-Bench/calculate_statistics.py not found; expected a clone of "
                                         r"https://github.com/stepfun-ai/Step1X-Edit at commit 570eba6ebda0"):
        verify(out, clone)
    F.save(clone / "GEdit-Bench" / "calculate_statistics.py", b"print('another version')\n")
    F.save(clone / "GEdit-Bench" / "viescore" / "utils.py", b"\n")
    res = runner.invoke(app, ["bench", "verify", str(out), "--clone", str(clone)])
    assert res.exit_code != 0
    assert "GEdit-Bench/calculate_statistics.py is not a version editlens was checked against" in res.output
    assert "stepfun-ai/Step1X-Edit at commit 570eba6ebda0" in res.output
    with pytest.raises(InputError, match="RISEBench"):  # every benchmark names its repository
        recognise("rise", tmp_path)


def test_verify_refuses_a_run_that_asked_editlens_own_prompts(tmp_path, monkeypatch):
    out = _gedit_run(tmp_path)  # no --prompts-from: editlens' wording, its answers in editlens' format
    import editlens.runner.official as O

    monkeypatch.setattr(O, "recognise", lambda name, clone: ({}, {}))  # past the clone check
    with pytest.raises(InputError, match="own prompt wording.*--prompts-from CLONE"):
        verify(out, tmp_path)
    assert "not comparable" in export_official(out, tmp_path / "official")["note"]


def test_a_figure_is_equal_only_within_float_noise_and_both_missing_is_equal():
    assert Figure("m", "s", "r", "O", 2.5, 2.5 + 1e-12).verdict == "EQUAL"
    assert Figure("m", "s", "r", "O", 3.1294, 3.13).verdict == "DIFFERENT"
    assert Figure("m", "s", "r", "O", None, None).verdict == "EQUAL"
    assert Figure("m", "s", "r", "O", 1.0, None).verdict == "DIFFERENT"


def test_the_reason_names_the_items_each_side_read_and_the_random_fallbacks():
    reads = [ItemRead("m/a", "m", "add", 4.0, None, "no 'Name: N' line"),
             ItemRead("m/b", "m", "add", None, 3.5),
             ItemRead("m/c", "m", "add", 3.0, 2.0),
             ItemRead("m/d", "m", "add", None, None, "unreadable; the release inserts random.randint(0, 10)"),
             ItemRead("m/e", "m", "style", 1.0, 1.0)]
    why = _differences(reads, lambda i: i.category == "add")
    assert "1 item(s) read by editlens, not by the release (m/a: no 'Name: N' line)" in why
    assert "1 item(s) read by the release, unscored by editlens (m/b = 3.5)" in why
    assert "1 item(s) read differently (m/c: editlens 3.0, release 2.0)" in why
    assert "1 answer(s) the release would replace by a random number" in why
    assert _differences(reads, lambda i: i.category == "style") == ""  # read alike: nothing to say


def test_verify_text_prints_each_figure_with_both_values_the_verdict_and_the_counts():
    res = {"benchmark": "imgedit", "clone": "/c", "version": {"commit": "547185d12c08267a"},
           "figures": [Figure("m", "single-turn", "add", "score", 3.0, 3.5, "why").to_dict(),
                       Figure("m", "single-turn", "style", "score", 4.0, 4.0).to_dict()],
           "equal": 1, "different": 1, "notes": ["a note"]}
    text = verify_text(res)
    assert "| m | single-turn | add | score | 3.0000 | 3.5000 | DIFFERENT | why |" in text
    assert "| m | single-turn | style | score | 4.0000 | 4.0000 | EQUAL |  |" in text
    assert "1 EQUAL, 1 DIFFERENT" in text and "commit 547185d12c08" in text and "note: a note" in text


class KrisAnswers(FakeServer):
    """KRIS-Bench answers: the score key the question asks for (by the stand-in prompt's name); the
    quality answer of every case is prose, so that dimension is unreadable and the others kept."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    def good_answer(self, body):  # type: ignore[no-untyped-def]
        sent = json.dumps(body.get("messages", ""))
        if "P-dual_evaluation" in sent:
            return '{"instruction_score": 4, "knowledge_score": 2, "reasoning": "ok"}'
        if "P-instruction" in sent:
            return '{"instruction_score": 4, "reasoning": "ok"}'
        if "P-quality" in sent:
            return "It looks fine."
        return '{"consistency_score": 5, "reasoning": "ok"}'


def test_kris_export_writes_each_categorys_metrics_json_with_the_scripts_keys(tmp_path):
    base = F.kris(tmp_path / "bench")
    edits = F.kris_outputs(tmp_path / "edits", "m", base)
    clone = F.kris_clone(tmp_path / "clone")
    with KrisAnswers().running() as url:
        run_benchmark("kris", base, tmp_path / "out", edits=edits, vlm=url, prompts_from=clone, cache=False,
                      n_boot=10, progress=False)
    export_official(tmp_path / "out", tmp_path / "official")
    plain = json.loads((tmp_path / "official" / "m" / "count_change" / "metrics.json").read_text())
    # what metrics_common.py writes per image: the three scores and reasonings; the unreadable one is null
    assert plain == {"1": {"instruction": "", "explain": "", "consistency_score": 5, "consistency_reasoning": None,
                           "instruction_score": 4, "instruction_reasoning": None, "quality_score": None,
                           "quality_reasoning": None}}
    knowledge = json.loads((tmp_path / "official" / "m" / "biology" / "metrics.json").read_text())["7"]
    assert (knowledge["instruction_score"], knowledge["knowledge_score"]) == (4, 2)  # metrics_knowledge.py's keys
    assert knowledge["explain"] == "Leaves lose chlorophyll and turn yellow or red."


def test_an_owners_script_that_fails_is_an_error_naming_it_and_a_missing_module_says_what_to_do(tmp_path):
    import sys

    from editlens.runner.official import run_script

    script = tmp_path / "step1_get_avgscore.py"
    script.write_text("import a_module_the_owners_env_has\n")
    with pytest.raises(InputError, match=r"step1_get_avgscore.py failed: .* exited 1 \(the owners' code imports the "
                                         r"module 'a_module_the_owners_env_has', which .* lacks: install it with `.* -m "
                                         r"pip install a_module_the_owners_env_has`.*--owner-python"):
        run_script([sys.executable, str(script)], tmp_path, "step1_get_avgscore.py")
    script.write_text("print('3.25')\n")
    assert run_script([sys.executable, str(script)], tmp_path, "x").strip() == "3.25"


# ------------------------------------------------------------------------------------------------ MagicBrush, Emu Edit


def _pixel_run(tmp_path, name, model="m"):
    """A model-free (L1/L2) run of ``name`` on the tiny published files, edits of another size than the
    ground truth, one of them JPEG."""
    edits = tmp_path / "edits" / model
    if name == "emu-edit":
        data = F.emu(tmp_path / "bench")
        F.save(edits / "0.png", F.png(70, (40, 30)))
        F.save(edits / "1.jpg", F.png(71, (20, 20), fmt="JPEG"))
        metrics = ("L1",)
    else:
        data = F.magicbrush_test(tmp_path / "bench")
        F.save(edits / "242679_1.png", F.png(70, (40, 30)))
        F.save(edits / "242679_2.jpg", F.png(71, (20, 20), fmt="JPEG"))
        metrics = ("L1", "L2")
    run_benchmark(name, data, tmp_path / "out", edits=tmp_path / "edits", metrics=metrics, cache=False, n_boot=10,
                  progress=False)
    return tmp_path / "out", data, edits


@pytest.mark.parametrize("name,second", [("magicbrush", "242679_inde_2"), ("magicbrush-multiturn", "242679_iter_2")])
def test_magicbrush_export_writes_image_evals_layout_with_the_edits_bytes_and_the_ground_truth(tmp_path, name,
                                                                                                second):
    from PIL import Image

    out, data, edits = _pixel_run(tmp_path, name)
    res = runner.invoke(app, ["bench", "export", str(out), "--official", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "image_eval.py --generated_path DIR/MODEL --gt_path DIR/gt" in res.output
    o = tmp_path / "o"
    assert sorted(str(p.relative_to(o)) for p in o.rglob("*") if p.is_file()) == [
        "gt/242679/242679-output1.png", "gt/242679/242679-output2.png", "m/242679/242679_1.png",
        f"m/242679/{second}.jpg"]
    # the edits byte for byte (a JPEG stays a JPEG at its own size: the owners' script resizes it)
    assert (o / "m" / "242679" / f"{second}.jpg").read_bytes() == (edits / "242679_2.jpg").read_bytes()
    assert Image.open(o / "m" / "242679" / "242679_1.png").size == (40, 30)
    img = data / "images" / "242679"
    assert (o / "gt" / "242679" / "242679-output2.png").read_bytes() == (img / "242679-output2.png").read_bytes()


def test_a_model_named_like_the_ground_truth_folder_is_refused_before_it_overwrites_it(tmp_path):
    out, _, _ = _pixel_run(tmp_path, "magicbrush", model="gt")
    res = runner.invoke(app, ["bench", "export", str(out), "--official", str(tmp_path / "o")])
    assert res.exit_code == 2 and "a model named 'gt' cannot be exported in this layout" in res.output, res.output


def test_emu_edit_export_pairs_each_edit_with_its_source_as_image_evals_ground_truth(tmp_path):
    import pyarrow.parquet as pq

    out, data, edits = _pixel_run(tmp_path, "emu-edit")
    export_official(out, tmp_path / "o")
    o = tmp_path / "o"
    assert sorted(str(p.relative_to(o)) for p in o.rglob("*") if p.is_file()) == [
        "gt/0/0-output1.png", "gt/1/1-output1.png", "m/0/0_1.png", "m/1/1_1.jpg"]
    rows = pq.read_table(data).to_pylist()
    assert (o / "gt" / "1" / "1-output1.png").read_bytes() == rows[1]["image"]["bytes"]  # the source, as embedded
    assert (o / "m" / "1" / "1_1.jpg").read_bytes() == (edits / "1.jpg").read_bytes()


def test_an_edit_in_another_format_is_decoded_into_a_png_the_owners_script_reads(tmp_path):
    from PIL import Image

    from editlens.runner.official import _owner_image

    im = Image.new("RGB", (9, 7), (10, 200, 30))
    buf = __import__("io").BytesIO()
    im.save(buf, format="WEBP", lossless=True)
    p = _owner_image(buf.getvalue(), tmp_path / "5" / "5_1")
    assert p.name == "5_1.png" and Image.open(p).format == "PNG"
    assert Image.open(p).convert("RGB").tobytes() == Image.open(buf).convert("RGB").tobytes()


@pytest.mark.parametrize("name", ["magicbrush", "magicbrush-multiturn", "emu-edit"])
def test_verify_refuses_an_image_eval_it_does_not_know_naming_file_and_commit(tmp_path, name):
    out, _, _ = _pixel_run(tmp_path, name)
    clone = tmp_path / "MagicBrush"
    F.save(clone / "evaluation" / "image_eval.py", b"def eval_distance(pairs, metric='l1'):\n    return 0.0\n")
    res = runner.invoke(app, ["bench", "verify", str(out), "--clone", str(clone)])
    assert res.exit_code != 0
    assert "evaluation/image_eval.py is not a version editlens was checked against" in res.output
    assert "OSU-NLP-Group/MagicBrush at commit fcfc8921396b" in res.output


def test_verify_names_the_module_the_owners_python_lacks_and_how_to_install_it(tmp_path, monkeypatch):
    import editlens.runner.official as O

    out, _, _ = _pixel_run(tmp_path, "magicbrush")
    script = tmp_path / "MagicBrush" / "evaluation" / "image_eval.py"
    F.save(script, b"import torch\nimport clip\n")  # what its top imports; the test Python has no OpenAI CLIP
    monkeypatch.setattr(O, "recognise", lambda name, clone: ({"script": script}, {"commit": "x"}))
    monkeypatch.setitem(O.PIP_NAMES, "clip", "openai-clip")
    script.write_text("raise ModuleNotFoundError(\"No module named 'clip'\", name='clip')\n")
    with pytest.raises(InputError, match=r"the pixel_distance step failed: .* exited 3 \(the owners' code imports "
                                         r"the module 'clip', which .* lacks: install it with `.* -m pip install "
                                         r"openai-clip`, or give --owner-python"):
        verify(out, tmp_path / "MagicBrush")


def test_pixel_distance_pairs_turns_settings_and_rows_as_the_owners_functions_say(tmp_path):
    """The driver's grouping, with a stand-in for image_eval.py that has its function names (our own code:
    mean absolute difference of two numbers written in the files)."""
    import subprocess
    import sys

    from editlens.bench import official_driver

    script = tmp_path / "image_eval.py"
    script.write_text(
        "import os\n"
        "def get_all_turn_imgs(d, kind):\n"
        "    names = sorted(n for n in os.listdir(d) if ('output' in n) == (kind == 'gt') and 'iter' not in n)\n"
        "    return [os.path.join(d, n) for n in names]\n"
        "def get_final_turn_img(d, kind):\n"
        "    names = sorted(n for n in os.listdir(d) if ('output' in n) == (kind == 'gt'))\n"
        "    return os.path.join(d, names[-1])\n"
        "def eval_distance(pairs, metric='l1'):\n"
        "    v = [abs(float(open(a).read()) - float(open(b).read())) for a, b in pairs]\n"
        "    return sum(x if metric == 'l1' else x * x for x in v) / len(v)\n")
    gen, gt = tmp_path / "m", tmp_path / "gt"
    for sid, vals in {"1": [(0.5, 0.25)], "2": [(0.0, 1.0), (0.5, 0.0)]}.items():
        for t, (a, b) in enumerate(vals, 1):
            F.save(gen / sid / (f"{sid}_1.png" if t == 1 else f"{sid}_inde_{t}.png"), str(a).encode())
            F.save(gt / sid / f"{sid}-output{t}.png", str(b).encode())
    req = {"files": {"script": str(script)}, "gt": str(gt), "models": {"m": str(gen)},
           "settings": ["all_turn", "final_turn"], "metrics": ["l1", "l2"], "rows": None}
    (tmp_path / "req.json").write_text(json.dumps(req))
    subprocess.run([sys.executable, official_driver.__file__, "pixel_distance", str(tmp_path / "req.json"),
                    str(tmp_path / "res.json")], check=True)
    figs = json.loads((tmp_path / "res.json").read_text())["figures"]["m"]
    assert figs["all_turn"]["turn 1"] == {"l1": pytest.approx(0.625), "l2": pytest.approx((0.0625 + 1) / 2)}
    assert figs["all_turn"]["turn 2"]["l1"] == pytest.approx(0.5)
    assert figs["all_turn"]["overall"]["l1"] == pytest.approx((0.25 + 1 + 0.5) / 3)
    assert figs["final_turn"]["turn 1"]["l1"] == pytest.approx(0.25)  # session 1 ends at turn 1
    assert figs["final_turn"]["turn 2"]["l1"] == pytest.approx(0.5)  # session 2's last pair
    req["rows"] = {"1": "add", "2": "remove"}
    req["settings"] = ["all_turn"]
    (tmp_path / "req.json").write_text(json.dumps(req))
    subprocess.run([sys.executable, official_driver.__file__, "pixel_distance", str(tmp_path / "req.json"),
                    str(tmp_path / "res.json")], check=True)
    figs = json.loads((tmp_path / "res.json").read_text())["figures"]["m"]["all_turn"]
    assert set(figs) == {"add", "remove", "overall"} and figs["remove"]["l1"] == pytest.approx(0.75)


@pytest.mark.parametrize("script", ["multi", "temporal", "view"])
def test_kris_driver_calls_each_scripts_extractor_with_the_score_key_that_script_passes(tmp_path, script):
    """metrics_multi_element.py / metrics_temporal_prediction.py read every answer with metrics_common's
    generic extractor and the question's score key; metrics_view_change.py with its three named extractors.
    Stand-ins of our own with those names (each returns the key it was asked for and the JSON value)."""
    import subprocess
    import sys

    from editlens.bench import official_driver
    from editlens.runner.official import _KRIS_CALLS

    (tmp_path / "metrics_common.py").write_text(
        "import json\n"
        "def extract_score_and_reason(resp, score_key, reason_fields):\n"
        "    return (score_key, json.loads(resp).get(score_key)), None\n"
        "def extract_consistency_score_and_reason(resp):\n"
        "    return ('consistency_score', json.loads(resp).get('consistency_score')), None\n"
        "def extract_instruction_score_and_reason(resp):\n"
        "    return ('instruction_score', json.loads(resp).get('instruction_score')), None\n"
        "def extract_quality_score_and_reason(resp):\n"
        "    return ('quality_score', json.loads(resp).get('quality_score')), None\n")
    (tmp_path / f"metrics_{script}.py").write_text(  # imports it as the owners' scripts do
        "from metrics_common import (extract_score_and_reason, extract_consistency_score_and_reason,\n"
        "    extract_instruction_score_and_reason, extract_quality_score_and_reason)\n")
    answers = {q: json.dumps({"consistency_score": 1, "instruction_score": 2, "quality_score": 3})
               for q in ("VC", "IF", "VQ")}
    req = {"files": {"scripts": {script: str(tmp_path / f"metrics_{script}.py")}, "prompts": None},
           "items": [{"id": "m/x/1", "script": script, "answers": answers, "calls": _KRIS_CALLS[script]}]}
    (tmp_path / "req.json").write_text(json.dumps(req))
    subprocess.run([sys.executable, official_driver.__file__, "kris", str(tmp_path / "req.json"),
                    str(tmp_path / "res.json")], check=True, cwd=tmp_path)
    got = json.loads((tmp_path / "res.json").read_text())["items"]["m/x/1"]
    assert got == {"VC": ["consistency_score", 1], "IF": ["instruction_score", 2], "VQ": ["quality_score", 3]}
