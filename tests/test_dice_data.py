"""DICE training data: stage-1 pairs and stage-2 synthetic edits from a small
COCO-format set (generated shapes; on real aurora photos when ../shared is there)."""

import json

import numpy as np
import pytest
from helpers import shared_path
from typer.testing import CliRunner

from editlens.dice.data.edits import choose_objects, coherence_records, mask_box, recolour
from editlens.dice.data.pairs import label_pair, similar_pairs, verify


def _cli(*args):
    from editlens.cli.main import app

    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _lines(p):
    return [json.loads(x) for x in open(p)]


@pytest.fixture
def coco(tmp_path):
    from editlens.testing.tiny_coco import make_coco

    return make_coco(tmp_path / "coco", n_images=6)


# -- stage 1 ----------------------------------------------------------------------------

def test_similar_pairs_uses_cosine_threshold():
    e = np.array([[1, 0, 0], [0.8, 0.6, 0], [0, 1, 0], [0, 0, 1]], float)
    # cosines: 0-1 0.8, 1-2 0.6 (not > 0.6), 0-2 0, 3 alone
    assert [(i, j) for i, j, _ in similar_pairs(e, 3, 0.6)] == [(0, 1)]
    assert [(i, j) for i, j, _ in similar_pairs(e, 3, 0.5)] == [(0, 1), (1, 2)]
    assert similar_pairs(e[:1], 3, 0.0) == []


def test_label_pair_hand_example():
    first = [{"name": "cat", "box": [0, 0, .4, .4]}, {"name": "cat", "box": [.6, .6, 1, 1]},
             {"name": "dog", "box": [.5, 0, 1, .4]}]
    second = [{"name": "cat", "box": [.6, .6, 1, .95]}, {"name": "car", "box": [0, .5, .3, 1]}]
    got = [(d["command"], d["object"], d["box"]) for d in label_pair(first, second, 0.5)]
    assert got == [("EDIT", "cat", [.6, .6, 1, .95]), ("REMOVE", "cat", [0, 0, .4, .4]),
                   ("REMOVE", "dog", [.5, 0, 1, .4]), ("ADD", "car", [0, .5, .3, 1])]
    # below the IoU threshold the same class is a REMOVE and an ADD
    got = [d["command"] for d in label_pair(first[1:2], second[:1], 0.95)]
    assert got == ["REMOVE", "ADD"]


def test_verifier_drops_contradicted_labels():
    class Fake:
        def scores(self, image, names):
            return {n: (0.9 if (image[0, 0, 0] == 1 and n == "dog") else 0.1) for n in names}

    diffs = [{"command": "REMOVE", "object": "dog"}, {"command": "REMOVE", "object": "cat"},
             {"command": "ADD", "object": "dog"}]
    first, second = np.zeros((2, 2, 3), np.uint8), np.ones((2, 2, 3), np.uint8)
    kept, dropped = verify(diffs, first, second, Fake(), 0.3)
    # the dog is seen in the second image: "REMOVE dog" is wrong; "ADD dog" is checked on the first (absent): kept
    assert [(d["command"], d["object"]) for d in kept] == [("REMOVE", "cat"), ("ADD", "dog")] and dropped == 1


def test_make_pairs_cli_and_resume(coco, tmp_path, tiny_dino_dir):
    ann, imgs = coco
    out = tmp_path / "pairs"
    args = ["dice", "make-pairs", "--annotations", str(ann), "--images", str(imgs), "--out", str(out),
            "--embedder", str(tiny_dino_dir), "--min-similarity", "0.0", "--min-box", "8", "--no-progress"]
    stats = _cli(*args)
    rows = _lines(out / "train.jsonl")
    assert stats["records"] == len(rows) > 0 and stats["this_run"]["images"] == 6
    gt = json.loads(ann.read_text())
    names = {c["id"]: c["name"] for c in gt["categories"]}
    classes = {i["id"]: {names[a["category_id"]] for a in gt["annotations"] if a["image_id"] == i["id"]}
               for i in gt["images"]}
    for r in rows:
        a, b = (int(x) for x in r["id"].split("-"))
        assert classes[a] & classes[b]  # at least one shared class
        assert (out / r["source"]).is_file() and (out / r["edited"]).is_file()
        for d in r["differences"]:
            assert d["command"] in ("ADD", "REMOVE", "EDIT") and 0 <= d["box"][0] < d["box"][2] <= 1
            if d["command"] == "REMOVE":
                assert d["object"] in classes[a]
            else:
                assert d["object"] in classes[b]
    assert sum(stats["by_command"].values()) == sum(len(r["differences"]) for r in rows)
    # a cut-off last line is dropped and redone; nothing is duplicated
    text = (out / "train.jsonl").read_text()
    (out / "train.jsonl").write_text(text[: len(text) - 20])
    again = _cli(*args)
    assert _lines(out / "train.jsonl") == rows and again["records"] == len(rows)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["command"] == "dice make-pairs" and str(ann) in prov["sources"]
    # the stricter similarity threshold keeps fewer (or equal) pairs
    strict = _cli(*args[:-1], "--min-similarity", "0.99", "--out", str(tmp_path / "strict"), "--no-progress")
    assert strict["records"] <= len(rows)


def test_owlv2_verification_hook(coco, tmp_path, tiny_dino_dir, clip_tokenizer):
    from editlens.dice.data.pairs import OwlV2Verifier
    from editlens.testing.tiny_dice import build_owlv2

    owl = build_owlv2(tmp_path / "owl", clip_tokenizer)
    scores = OwlV2Verifier(str(owl), "cpu").scores(np.zeros((40, 50, 3), np.uint8), ["square", "disc"])
    assert set(scores) == {"square", "disc"} and all(0.0 <= v <= 1.0 for v in scores.values())
    ann, imgs = coco
    base = ["dice", "make-pairs", "--annotations", str(ann), "--images", str(imgs), "--embedder", str(tiny_dino_dir),
            "--min-similarity", "0.0", "--min-box", "8", "--no-progress"]
    plain = _cli(*base, "--out", str(tmp_path / "plain"))
    checked = _cli(*base, "--out", str(tmp_path / "checked"), "--verify-with", str(owl))
    dropped = checked["this_run"]["labels_dropped_by_verifier"]
    # every label the verifier contradicted is missing from the verified set, nothing else is
    assert plain["differences"] - checked["differences"] == dropped
    assert checked["by_command"].get("EDIT", 0) == plain["by_command"].get("EDIT", 0)


# -- stage 2 ----------------------------------------------------------------------------

def test_choose_objects_respects_area_and_overlap():
    rng = np.random.default_rng(0)
    m = np.zeros((4, 100, 100), bool)
    m[0, :50, :50] = True           # 25%
    m[1, 40:90, 40:90] = True       # 25%, overlaps 0 by 100 px = 4% of 2500
    m[2, :45, :45] = True           # inside 0: overlap 81% -> never with 0
    m[3, 99, 99] = True             # 0.01%: too small
    for seed in range(10):
        got = choose_objects(list(m), 0.03, 0.05, 4, np.random.default_rng(seed))
        assert 3 not in got and not {0, 2} <= set(got) and len(got) == 2
    assert choose_objects(list(m), 0.03, 0.05, 1, rng).__len__() == 1


def test_recolour_and_mask_box():
    img = np.full((20, 30, 3), (200, 30, 30), np.uint8)
    mask = np.zeros((20, 30), bool)
    mask[5:10, 6:16] = True
    out, colour = recolour(img, mask, np.random.default_rng(0))
    assert (out[~mask] == img[~mask]).all() and (out[mask] != img[mask]).any() and colour != "red"
    assert mask_box(mask) == [0.2, 0.25, round(16 / 30, 5), 0.5]


def test_coherence_records_yes_for_the_asked_change_no_for_the_rest():
    rec = {"source": "s", "edited": "e", "differences": [
        {"command": "ADD", "object": "cat", "box": [0, 0, .5, .5]},
        {"command": "EDIT", "object": "car", "box": [.5, .5, 1, 1], "edit": {"kind": "colour", "target": "blue"}}]}
    rows = coherence_records("7", rec, ["dog"], np.random.default_rng(0))
    got = [(r["instruction"], r["difference"]["object"], r["decision"]) for r in rows]
    assert got == [("add a cat", "cat", "YES"), ("add a cat", "car", "NO"),
                   ("make the car blue", "cat", "NO"), ("make the car blue", "car", "YES")]
    single = coherence_records("8", {**rec, "differences": rec["differences"][:1]}, ["dog"], np.random.default_rng(0))
    assert [r["decision"] for r in single] == ["YES", "NO"] and "dog" in single[1]["instruction"]


def _check_edits(out, stats, n_images):
    rows = _lines(out / "train.jsonl")
    assert len(rows) == stats["records"] and stats["this_run"]["images"] == n_images
    ops = stats["by_command"]
    assert max(ops.values()) - min(ops.values()) <= 1  # balanced operations
    from PIL import Image

    for r in rows:
        assert r["source"].endswith(".jpg") and 15 <= min(r["jpeg_quality"]) <= max(r["jpeg_quality"]) <= 50
        a, b = (np.asarray(Image.open(out / r[k]).convert("RGB")).astype(int) for k in ("source", "edited"))
        assert a.shape == b.shape == (r["height"], r["width"], 3)
        assert len(r["differences"]) <= 4
        for d in r["differences"]:
            x0, y0, x1, y1 = d["box"]
            assert (x1 - x0) * (y1 - y0) >= 0.03 * 0.9  # masks >= 3% (their box is at least as large)
            px = (slice(int(y0 * r["height"]), int(y1 * r["height"])), slice(int(x0 * r["width"]), int(x1 * r["width"])))
            # the edit happened inside its box: far beyond JPEG noise there
            assert np.abs(a[px] - b[px]).mean() > 8
    coh = _lines(out / "coherence.jsonl")
    assert len(coh) == stats["coherence_records"] and {c["decision"] for c in coh} == {"YES", "NO"}
    return rows


def test_make_edits_cli_resume_and_train_format(coco, tmp_path):
    ann, imgs = coco
    out = tmp_path / "edits"
    args = ["dice-make-edits", "--annotations", str(ann), "--images", str(imgs), "--out", str(out),
            "--unchanged", "0.2", "--no-progress"]
    stats = _cli(*args)
    rows = _check_edits(out, stats, 6)
    assert json.loads((out / "provenance.json").read_text())["inpainter"]["backend"] == "opencv"
    # resume: nothing redone, same records
    again = _cli(*args)
    assert again["this_run"]["written"] == 0 and _lines(out / "train.jsonl") == rows
    from editlens.cli.main import app

    r = CliRunner().invoke(app, [*args, "--seed", "3"])
    assert r.exit_code == 2 and "other settings" in r.output and "'seed': (0, 3)" in r.output
    # both files load as training data for their stage
    from editlens.dice.training import load_records

    assert len(load_records(out, "detect")) == len(rows)
    assert len(load_records(out, "coherence")) == stats["coherence_records"]



def test_make_edits_refuses_bad_inputs(coco, tmp_path):
    from editlens.cli.main import app

    ann, imgs = coco
    r = CliRunner().invoke(app, ["dice-make-edits", "--annotations", str(tmp_path / "none.json"), "--images",
                                 str(imgs), "--out", str(tmp_path / "o"), "--no-progress"])
    assert r.exit_code == 2 and "none.json: annotation file not found" in r.output
    r = CliRunner().invoke(app, ["dice-make-edits", "--annotations", str(ann), "--images", str(imgs), "--out",
                                 str(tmp_path / "o"), "--inpainter", "magic", "--no-progress"])
    assert r.exit_code == 2 and "--inpainter must be opencv or diffusers" in r.output


@pytest.mark.integration
def test_both_stages_on_real_photos(tmp_path, tiny_dino_dir):
    from editlens.testing.tiny_coco import make_coco

    photos = sorted(shared_path("data", "aurora", "data", "magicbrush", "images").rglob("*-input.png"))[:6]
    ann, imgs = make_coco(tmp_path / "coco", n_images=6, size=(120, 160), backgrounds=photos)
    stats = _cli("dice-make-edits", "--annotations", str(ann), "--images", str(imgs), "--out", str(tmp_path / "e"),
                 "--no-progress")
    _check_edits(tmp_path / "e", stats, 6)
    pairs = _cli("dice", "make-pairs", "--annotations", str(ann), "--images", str(imgs), "--out", str(tmp_path / "p"),
                 "--embedder", str(tiny_dino_dir), "--min-similarity", "0.0", "--no-progress")
    assert pairs["records"] > 0
