"""EditScore and EditReward end to end through the commands: a benchmark in
its published format -> meta-eval prepare -> run -> meta-eval -> report,
compare (one pair, many, by scores or by a judge in both orders),
best-of-n, relabel, score and /v1/score."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.testing import tiny_benchmarks as TB
from editlens.testing import tiny_reward as TR

runner = CliRunner()


def cli(*args):
    res = runner.invoke(app, [str(a) for a in args])
    return res


def _reward_opts(editscore_dirs, editreward_dirs):
    _, adapter = editscore_dirs["q25"]
    base, ckpt = editreward_dirs["q3"]
    return ["--model", f"editscore={adapter}", "--model", f"editreward={ckpt}", "--option", f"editreward.base={base}",
            "--option", "editreward.image_pixels=2304", "--option", "editscore.max_new_tokens=16",
            "--device", "cpu", "--dtype", "float32"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    TB.write_editscore_bench(root / "published", "arrow")
    res = cli("meta-eval", "prepare", "editscore-bench", root / "published", "--out", root / "prep")
    assert res.exit_code == 0, res.output
    assert "8 edits, 12 labelled pairs" in res.output
    return root


def test_run_meta_eval_report(prepared, editscore_dirs, editreward_dirs, tmp_path):
    prep = prepared / "prep"
    opts = _reward_opts(editscore_dirs, editreward_dirs)
    res = cli("run", prep / "manifest.jsonl", "--out", tmp_path / "run", "--metrics", "editscore,editreward",
              "--no-progress", *opts)
    assert res.exit_code == 0, res.output
    assert "editscore    scored     8" in res.output and "editreward   scored     8" in res.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    described = {e["name"]: e for e in manifest["evaluators"]}
    assert described["editscore"]["release"]["prompts_identical"] is False
    assert described["editreward"]["checkpoint"]["weights"]["model.safetensors"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert all(r["scores"]["editreward"]["details"]["release"]["checkpoint"].startswith("sha256:") for r in rows)

    res = cli("meta-eval", "editscore-bench", "--bench", prep, "--predictions", tmp_path / "run" / "results.jsonl",
              "--metric", "editreward", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["n_pairs"] == 12 and rep["n_unscored_pairs"] == 0 and set(rep["dimensions"]) == {
        "prompt_following", "consistency", "overall"}
    (tmp_path / "rep.json").write_text(res.stdout)
    # the same straight from the published file
    direct = cli("meta-eval", "editscore-bench", "--bench", prepared / "published", "--predictions",
                 tmp_path / "run" / "results.jsonl", "--metric", "editreward", "--json")
    assert json.loads(direct.stdout)["dimensions"] == rep["dimensions"]
    # EditScore's answers tie every pair (the tiny model always says [20, 25]): ties are wrong, as released
    es = json.loads(cli("meta-eval", "editscore-bench", "--bench", prep, "--predictions",
                        tmp_path / "run" / "results.jsonl", "--metric", "editscore", "--json").stdout)
    assert es["dimensions"]["overall"]["average"] == 0.0
    assert es["dimensions"]["prompt_following"]["score_field"] == {"details.prompt_following": 4}

    res = cli("report", tmp_path / "run", "--meta-eval", tmp_path / "rep.json", "--out", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    assert "editscore-editreward-bench" in (tmp_path / "r.html").read_text()

    # answers cut off after one token: every pass unscored, the raw text kept, no number anywhere
    res = cli("run", prep / "manifest.jsonl", "--out", tmp_path / "cut", "--metrics", "editscore", "--no-progress",
              *opts, "--option", "editscore.max_new_tokens=1")
    assert res.exit_code == 0 and "unscored    8" in res.output
    # ... and no pair scored is no accuracy at all: a message and exit 2, never a table of 0.0 or "-"
    cut = cli("meta-eval", "editscore-bench", "--bench", prep, "--predictions", tmp_path / "cut" / "results.jsonl",
              "--metric", "editscore", "--json")
    assert cut.exit_code == 2 and "not measured (n = 0: no pair has both edits scored)" in cut.output


def test_compare_best_of_n_relabel_score(prepared, editscore_dirs, editreward_dirs, tmp_path):
    prep = prepared / "prep"
    opts = _reward_opts(editscore_dirs, editreward_dirs)
    pairs = [json.loads(x) for x in (prep / "pairs.jsonl").read_text().splitlines()]
    p = pairs[0]
    res = cli("compare", "--source", p["source"], "--edited-a", p["edited_a"], "--edited-b", p["edited_b"],
              "--instruction", p["instruction"], "--metric", "editreward", "--json", *opts)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["verdict"] in ("A>B", "B>A") and 0 < doc["p_a_better"] < 1
    assert (doc["p_a_better"] > 0.5) == (doc["verdict"] == "A>B")
    res = cli("compare", "--pairs", prep / "pairs.jsonl", "--metric", "editscore", "--out", tmp_path / "v.jsonl", *opts)
    assert res.exit_code == 0, res.output and "12 pairs: A=B 12" in res.output
    v = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(v) == 12 and v[0]["sub_scores"]["prompt_following"] == [8.0, 8.0]

    res = cli("best-of-n", prep / "manifest.jsonl", "--metric", "editreward", "--json", *opts)
    assert res.exit_code == 0, res.output
    picks = json.loads(res.stdout)["picks"]
    assert len(picks) == 4 and all(pk["best_id"] for pk in picks)
    res = cli("relabel", prep / "manifest.jsonl", "--metric", "editreward", "--out", tmp_path / "r.jsonl", *opts)
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert {r["reward"] for r in rows} >= {1.0, 5.0} and "min-max of this manifest" in rows[0]["reward_scale"]

    e = json.loads((prep / "manifest.jsonl").read_text().splitlines()[0])
    res = cli("score", "--source", e["source"], "--edited", e["edited"], "--instruction", e["instruction"],
              "--metrics", "editscore", "--json", *opts)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["scores"]["editscore"]
    assert s["value"] == pytest.approx(8.0) and s["details"]["reasoning"]["SC"] == "the hat is there"


def test_judge_in_both_orders_shows_position_bias(prepared, tmp_path):
    # a real (tiny) VLM that always answers [[A>B]]: it prefers whatever it is shown first
    vlm = TR.program_answer(TR.build_qwen_vl(tmp_path / "vlm", "qwen2_5_vl"), ["[[A>B]]"])
    prep = prepared / "prep"
    res = cli("compare", "--pairs", prep / "pairs.jsonl", "--vlm", vlm, "--out", tmp_path / "v.jsonl",
              "--mmrb2-out", tmp_path / "mm.json", "--device", "cpu", "--dtype", "float32", "--cache", "none")
    assert res.exit_code == 0, res.output
    assert "A=B 12" in res.output and "consistency of the two orders 0.000 over 12 pairs" in res.output
    rep = json.loads(cli("meta-eval", "pairwise", "--human", prep / "pairs.jsonl", "--verdicts", tmp_path / "v.jsonl",
                         "--json").stdout)
    assert rep["accuracy_forward"] == 1.0 and rep["accuracy_reverse"] == 0.0 and rep["accuracy"] == 0.5
    assert rep["consistency"] == 0.0
    mm = json.loads((tmp_path / "mm.json").read_text())
    first = mm[json.loads((prep / "pairs.jsonl").read_text().splitlines()[0])["id"]]
    assert first["forward"][0]["judgement"] == "A" and first["reverse"][0]["judgement"] == "A"
    one = cli("compare", "--source", prep / "manifest.jsonl", "--edited-a", "x", "--edited-b", "y",
              "--instruction", "z", "--pairs", prep / "pairs.jsonl", "--vlm", vlm)
    assert one.exit_code == 2 and "--pairs replaces" in one.output
    single = json.loads((prep / "pairs.jsonl").read_text().splitlines()[0])
    res = cli("compare", "--source", single["source"], "--edited-a", single["edited_a"], "--edited-b",
              single["edited_b"], "--instruction", "x", "--vlm", vlm, "--orders", "forward", "--cache", "none",
              "--device", "cpu", "--dtype", "float32")
    assert res.exit_code == 0 and "verdict: A>B" in res.output


def test_score_endpoint_serves_reward_details(editscore_dirs):
    from fastapi.testclient import TestClient

    from editlens.metrics.registry import create_metric
    from editlens.runner.score_server import score_app

    _, adapter = editscore_dirs["q25"]
    ev = create_metric("editscore", model=str(adapter), device="cpu", dtype="float32", max_new_tokens=16)

    def b64(a):
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    (src, edt), = TR.tiny_edits(1)
    body = {"items": [{"source": b64(src), "edited": b64(edt), "instruction": "add a hat"}] * 2, "details": True}
    with TestClient(score_app({"editscore": ev}, api_key="k")) as client:
        assert client.post("/v1/score", json=body).status_code == 401
        r = client.post("/v1/score", json=body, headers={"Authorization": "Bearer k"})
        assert r.status_code == 200, r.text
        s = r.json()["scores"]
        assert [x["value"] for x in s] == [8.0, 8.0] and s[0]["details"]["reward"] == pytest.approx(0.8)
        assert "details" not in client.post("/v1/score", json={**body, "details": False},
                                            headers={"Authorization": "Bearer k"}).json()["scores"][0]
        assert client.get("/v1/models", headers={"Authorization": "Bearer k"}).json()["data"][0]["id"] == "editscore"
        assert client.post("/v1/score", content=b"\x80\x03pickle", headers={"Authorization": "Bearer k"}).status_code == 400


def test_serve_scores_alone_without_a_chat_model(monkeypatch):
    import editlens.backends.serving as serving

    seen = {}
    monkeypatch.setattr(serving, "serve_app", lambda app_, host, port, banner, access_log: seen.update(
        app=app_, banner=banner("http://127.0.0.1:1/v1")))
    res = cli("serve", "--score", "l1,ssim", "--port", "0")
    assert res.exit_code == 0, res.output
    paths = set(seen["app"].openapi()["paths"])
    assert "/v1/score" in paths and "/v1/chat/completions" not in paths
    assert seen["banner"].startswith("serving /v1/score (l1, ssim)")
    bad = cli("serve")
    assert bad.exit_code == 2 and "give --vlm" in bad.output
