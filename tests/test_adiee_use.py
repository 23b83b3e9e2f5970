"""ADIEE in use: registered evaluators (score, run, cache, meta-eval), the
fast feature scorer, best-of-n, relabel, the pairwise rule and /v1/score."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.core.types import EditSample, Score


def _write(path: Path, seed: int, size: int = 20) -> str:
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
    return path.name


@pytest.fixture
def manifest(tmp_path) -> Path:
    rows = []
    for i in range(4):
        rows.append({"id": f"m{i}", "source": _write(tmp_path / f"s{i // 2}.png", i // 2),
                     "edited": _write(tmp_path / f"e{i}.png", 100 + i), "instruction": f"change {i // 2}",
                     "model": f"model{i % 2}"})
    f = tmp_path / "manifest.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


@pytest.fixture
def released_ckpt(tiny_vlm_dirs, tmp_path) -> Path:
    from editlens.adiee.checkpoint import save_released, scorer_from_base

    return save_released(scorer_from_base(str(tiny_vlm_dirs["llava_next"]), device="cpu"), tmp_path / "ckpt")


def test_adiee_evaluator_registry_cache_and_run(released_ckpt, manifest, tmp_path):
    from editlens.bench.aurora import pointwise_report
    from editlens.data.manifest import read_manifest
    from editlens.metrics.registry import get_spec
    from editlens.runner.run import run_evaluation
    from editlens.runner.selection import select_metrics

    spec = get_spec("adiee")
    assert spec.higher_is_better and spec.value_range == (0.0, 10.0)
    models = {"adiee": str(released_ckpt)}
    # released-exact: a score even when [SCORE] is never emitted (flagged in details)
    sel = select_metrics(["adiee"], models=models, options={"adiee": {"image_side": 32, "require_token": False}},
                         device="cpu")
    m = sel.metrics[0]
    samples = [s.load() for s in read_manifest(manifest).samples]
    first = m.score_batch(samples)
    assert all(s.status == "scored" for s in first) and m.calls == 1  # one batched call for 4 samples
    assert first[0].details["hidden"] == "emitting-step"  # released checkpoints default to the released behaviour
    # editlens' own question wording is not the paper's: every result says so, with how to pass the paper's
    assert first[0].details["identical_to_release"] is False
    assert any("editlens' own wording" in d and "adiee.questions=FILE" in d
               for d in first[0].details["differences_from_release"])
    paper = tmp_path / "paper_questions.txt"
    paper.write_text("My own copy of the paper's question about $instruction?\n")
    faithful = select_metrics(["adiee"], models=models, options={"adiee": {
        "image_side": 32, "require_token": False, "questions": str(paper), "batch_size": 1}}, device="cpu").metrics[0]
    assert faithful.release_provenance() == {"identical_to_release": True, "differences_from_release": []}
    assert faithful.describe()["identical_to_release"] is True
    again = m.score_batch(samples)
    assert m.calls == 1 and [s.value for s in again] == [s.value for s in first]
    assert all(s.details["cached"] for s in again)
    other = select_metrics(["adiee"], models=models, options={"adiee": {"image_side": 32, "hidden": "score-token",
                                                                         "require_token": False}},
                           device="cpu").metrics[0]
    assert [s.value for s in other.score_batch(samples)] != [s.value for s in first]
    strict = select_metrics(["adiee"], models=models, options={"adiee": {"image_side": 32}},  # the default
                            device="cpu").metrics[0]
    for sc, loose in zip(strict.score_batch(samples), first):  # a random model rarely emits [SCORE]
        if loose.details["score_token_emitted"]:
            assert sc.value == loose.value
        else:
            assert sc.status == "unscored" and sc.details["raw"] == loose.details["answer"]
    # through the runner, then meta-evaluation against labels
    res = run_evaluation(read_manifest(manifest).samples, [m], tmp_path / "run", progress=False)
    assert res.summary["counts"]["adiee"]["scored"] == 4
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"m{i}", "model": "all", "human": float(i)}) + "\n" for i in range(4)))
    rep = pointwise_report(labels, tmp_path / "run" / "results.jsonl", "adiee", protocol="fisher", n_boot=50)
    assert rep["n_items"] == 4 and -1.0 <= rep["value"] <= 1.0


def test_adiee_needs_a_checkpoint():
    from editlens.errors import ModelUnavailableError
    from editlens.runner.selection import select_metrics

    with pytest.raises(ModelUnavailableError):
        select_metrics(["adiee"], models={"adiee": "/nonexistent/ckpt"})


def test_fast_scorer_train_save_load(tmp_path, tiny_clip_dir, tiny_dino_dir, manifest):
    from editlens.adiee.checkpoint import CheckpointError
    from editlens.adiee.fast import FastScorer, train_fast
    from editlens.data.manifest import read_manifest
    from editlens.runner.selection import select_metrics
    from editlens.testing.tiny_adiee import build_tiny_clip

    ds = tmp_path / "ds"
    (ds / "images").mkdir(parents=True)
    rows = []
    for i in range(10):
        rows.append({"id": str(i), "source": "images/" + _write(ds / "images" / f"s{i}.png", i),
                     "edited": "images/" + _write(ds / "images" / f"e{i}.png", 50 + i), "instruction": "add a cat",
                     "score": float(i % 2), "split": "val" if i >= 8 else "train"})
    (ds / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    models = {"clip": str(tiny_clip_dir), "dino": str(tiny_dino_dir)}
    s = train_fast(ds, tmp_path / "fast", models, epochs=60, lr=1e-2, device="cpu", echo=lambda m: None)
    assert s["last_loss"] < s["first_loss"] and s["n_train"] == 8 and s["n_val"] == 2
    m = select_metrics(["adiee_fast"], models={**models, "adiee_fast": str(tmp_path / "fast")}, device="cpu").metrics[0]
    scores = m.score_batch([x.load() for x in read_manifest(manifest).samples])
    assert all(sc.status == "scored" and 0.0 <= sc.value <= 10.0 for sc in scores)
    # the same features through the saved head give the same numbers
    fast = FastScorer.load(tmp_path / "fast", models=models, device="cpu")
    loaded = [x.load() for x in read_manifest(manifest).samples]
    direct = fast.score([x.source for x in loaded], [x.edited for x in loaded], [x.instruction for x in loaded])
    assert direct == pytest.approx([sc.value for sc in scores], abs=1e-5)
    other_clip = build_tiny_clip(tmp_path / "clip2", seed=1)
    with pytest.raises(CheckpointError, match="other CLIP/DINO weights"):
        FastScorer.load(tmp_path / "fast", models={**models, "clip": str(other_clip)}, device="cpu")


def test_best_of_n_hand_values():
    from editlens.adiee.reward import best_of_n

    samples = [EditSample(f"c{i}", "s.png" if i < 3 else "t.png", f"e{i}.png", "do it") for i in range(5)]
    scores = [Score("x", 0.2), Score("x", 0.9), Score("x", None, "unscored", "bad"), Score("x", 0.4), Score("x", 0.1)]
    picks = best_of_n(samples, scores, higher_is_better=True)
    assert [(p.best_id, p.best_value) for p in picks] == [("c1", 0.9), ("c3", 0.4)]
    assert [(p.best_id) for p in best_of_n(samples, scores, higher_is_better=False)] == ["c0", "c4"]
    assert best_of_n(samples[2:3], scores[2:3], True)[0].best_id is None  # nothing scored: no pick


def test_relabel_and_best_of_n_cli(manifest):
    from editlens.cli.main import app
    from editlens.data.manifest import read_manifest
    from editlens.metrics.registry import create_metric

    runner = CliRunner()
    r = runner.invoke(app, ["relabel", str(manifest), "--metric", "l1"])
    assert r.exit_code == 0, r.output
    out = manifest.with_suffix(".reward.jsonl")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    l1 = create_metric("l1").score_batch([s.load() for s in read_manifest(manifest).samples])
    for row, sc in zip(rows, l1):  # lower L1 is better: reward = 1 + 4 * (1 - l1)
        assert row["reward"] == pytest.approx(1 + 4 * (1 - sc.value), abs=1e-4)
        assert row["instruction_with_reward"].endswith(f"{round(row['reward'])} out of five.")
    r = runner.invoke(app, ["best-of-n", str(manifest), "--metric", "l1", "--json"])
    assert r.exit_code == 0, r.output
    picks = json.loads(r.stdout)["picks"]
    assert len(picks) == 2
    for p in picks:
        vals = {c["id"]: c["value"] for c in p["candidates"]}
        assert p["best_id"] == min(vals, key=vals.get)


def test_score_endpoint():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from editlens.core.types import LoadedEdit
    from editlens.metrics.registry import create_metric
    from editlens.runner.score_server import score_router

    l1 = create_metric("l1")
    app = FastAPI()
    app.include_router(score_router({"l1": l1}))
    client = TestClient(app)
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(3)]

    def b64(a):
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    body = {"items": [{"source": b64(imgs[0]), "edited": b64(imgs[i]), "instruction": "x"} for i in (1, 2, 0)]}
    r = client.post("/v1/score", json=body)
    assert r.status_code == 200, r.text
    want = [l1.score_batch([LoadedEdit("a", imgs[0], imgs[i], "x")])[0].value for i in (1, 2)] + [0.0]
    assert [s["value"] for s in r.json()["scores"]] == pytest.approx(want)
    bad = {"items": [{"source": b64(imgs[0]), "edited": b64(imgs[1]), "instruction": " "}]}
    assert client.post("/v1/score", json=bad).status_code == 400
    bad = {"items": [{"source": "%%%", "edited": b64(imgs[1]), "instruction": "x"}]}
    assert "not valid base64" in client.post("/v1/score", json=bad).text
    assert client.post("/v1/score", json={"items": body["items"], "metric": "nope"}).status_code == 400


def test_make_data_cli(tmp_path):
    from editlens.cli.main import app

    d = tmp_path / "in"
    d.mkdir()
    rows = [{"id": f"e{i}", "source": _write(d / f"s{i}.png", i), "reference": _write(d / f"r{i}.png", 9 + i),
             "instruction": "add a hat"} for i in range(2)]
    (d / "edits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = CliRunner().invoke(app, ["adiee", "make-data", str(d / "edits.jsonl"), "--out", str(tmp_path / "ds"),
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "12 samples" in r.stdout and "augmented_source 8" in r.stdout
    r = CliRunner().invoke(app, ["adiee", "make-data", str(d / "missing.jsonl"), "--out", str(tmp_path / "ds2")])
    assert r.exit_code == 2 and "file not found" in r.output


def test_serve_includes_score_router_behind_api_key():
    from fastapi.testclient import TestClient

    from editlens.backends.server import build_app
    from editlens.metrics.registry import create_metric
    from editlens.runner.score_server import score_router

    class _NoBackend:  # /v1/score never touches the chat backend
        def generate(self, requests):
            raise AssertionError("not used")

    app = build_app(_NoBackend(), "tiny", api_key="k", routers=[score_router({"l1": create_metric("l1")})])
    img = np.zeros((4, 4, 3), np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    b64 = base64.b64encode(buf.getvalue()).decode()
    body = {"items": [{"source": b64, "edited": b64, "instruction": "x"}]}
    with TestClient(app) as client:
        assert client.post("/v1/score", json=body).status_code == 401
        r = client.post("/v1/score", json=body, headers={"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.json()["scores"][0]["value"] == 0.0


@pytest.mark.integration
def test_aurora_multi_turn_sessions():
    from helpers import shared_path

    from editlens.adiee.data import find_sequences, read_edits

    root = shared_path("data", "aurora")
    edits = read_edits(root / "edits.jsonl")
    seqs, skipped = find_sequences(root / "data" / "magicbrush", edits)
    assert seqs and not skipped
    by_pair = {(e.source, e.reference): e.instruction for e in edits}
    for s in seqs:  # turn k's instruction is the edit from image k-1 to image k
        assert len(s.instructions) == len(s.images) - 1
        assert all(by_pair[(s.images[k - 1], s.images[k])] == s.instructions[k - 1] for k in range(1, len(s.images)))
