"""The diffusers inpainter of DICE's stage-2 data builder, run for real on a
tiny random Stable-Diffusion inpainting pipeline saved like a real one."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("diffusers")

from editlens.dice.data.inpaint import DiffusersInpainter, _grow, make_inpainter  # noqa: E402
from editlens.errors import InputError, ModelUnavailableError  # noqa: E402

STEPS = 2


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # tiny convolutions are fastest on one thread, and several threads crawl on a busy 2-core machine
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def sd_dir(tmp_path_factory):
    from editlens.testing.tiny_diffusers import build_sd_inpaint

    return build_sd_inpaint(tmp_path_factory.mktemp("tiny-sd-inpaint"), image_size=32)


@pytest.fixture(scope="module")
def inpainter(sd_dir):
    return DiffusersInpainter(str(sd_dir), steps=STEPS, seed=0)


def _scene(h: int, w: int, seed: int = 0) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, np.full((h, w), 120.0)], -1)
    return np.clip(base + np.random.default_rng(seed).normal(0, 5, (h, w, 3)), 0, 255).astype(np.uint8)


def _disc(h: int, w: int, cy: float, cx: float, r: float) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return (y - cy) ** 2 + (x - cx) ** 2 <= r * r


def test_saved_layout_is_a_real_sd_inpainting_directory(sd_dir):
    index = json.loads((sd_dir / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionInpaintPipeline"
    assert index["tokenizer"] == ["transformers", "CLIPTokenizer"]
    assert index["safety_checker"] == [None, None] and index["requires_safety_checker"] is False
    for sub in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        assert (sd_dir / sub).is_dir(), sub
    assert json.loads((sd_dir / "unet" / "config.json").read_text())["in_channels"] == 9


@pytest.mark.parametrize("h,w,where", [(53, 75, "middle"), (37, 91, "corner"), (64, 64, "middle")])
def test_only_the_grown_mask_changes_and_size_is_kept(inpainter, h, w, where):
    image = _scene(h, w)
    mask = _disc(h, w, h / 2, w / 2, min(h, w) / 5) if where == "middle" else _disc(h, w, 3, w - 4, 9)
    out = inpainter.remove(image, mask, "disc")
    assert out.shape == image.shape and out.dtype == np.uint8
    grown = _grow(mask, inpainter.grow).astype(bool)
    # bit for bit outside the mask grown by `grow` px, although the VAE altered the whole canvas it decoded
    np.testing.assert_array_equal(out[~grown], image[~grown])
    # the object's own pixels are all repainted (random weights: noise, far from the smooth input)
    changed = np.abs(out.astype(int) - image.astype(int)).max(-1) > 0
    assert changed[mask].mean() > 0.9
    assert np.abs(out[mask].astype(int) - image[mask].astype(int)).mean() > 10
    # the border ring is blended: changed, but by less than the inside
    ring = grown & ~_grow(mask, inpainter.grow - inpainter.feather).astype(bool)
    if where == "middle":
        assert changed[ring].mean() > 0.5


def test_same_seed_same_pixels_other_seed_other_pixels(inpainter, sd_dir):
    image, mask = _scene(40, 56, 1), _disc(40, 56, 20, 28, 9)
    first = inpainter.remove(image, mask, "cat")
    np.testing.assert_array_equal(first, inpainter.remove(image, mask, "cat"))
    again = DiffusersInpainter(str(sd_dir), steps=STEPS, seed=0)  # a fresh load, as a resumed run does
    np.testing.assert_array_equal(first, again.remove(image, mask, "cat"))
    other = DiffusersInpainter(str(sd_dir), steps=STEPS, seed=1)
    assert not np.array_equal(first, other.remove(image, mask, "cat"))
    # a substitution is prompted differently, so it paints other pixels, inside the same region
    drawn = inpainter.replace(image, mask, "dog")
    assert drawn is not None and not np.array_equal(first, drawn)
    grown = _grow(mask, inpainter.grow).astype(bool)
    np.testing.assert_array_equal(drawn[~grown], image[~grown])


def test_empty_mask_and_bad_inputs(inpainter):
    image = _scene(30, 40)
    np.testing.assert_array_equal(inpainter.remove(image, np.zeros((30, 40), bool)), image)
    with pytest.raises(InputError, match="mask is 41x30 but the image is 40x30"):
        inpainter.remove(image, np.ones((30, 41), bool))
    with pytest.raises(InputError, match="RGB uint8"):
        inpainter.remove(image[..., 0], np.ones((30, 40), bool))


def test_describe_reports_runtime_choices(inpainter):
    d = inpainter.describe()
    assert d["backend"] == "diffusers" and d["pipeline"] == "StableDiffusionInpaintPipeline"
    assert d["unet_in_channels"] == 9 and d["steps"] == STEPS and d["guidance"] == 4.0
    assert d["resolution"] == 32  # native size read from the model (UNet sample size x VAE downscale)
    import torch

    if not torch.cuda.is_available():
        assert (d["device"], d["dtype"]) == ("cpu", "float32")


def test_load_errors_name_the_directory_and_problem(sd_dir, tmp_path):
    with pytest.raises(InputError, match="nope: directory not found"):
        make_inpainter(f"diffusers:{tmp_path / 'nope'}")
    with pytest.raises(ModelUnavailableError, match="no model_index.json"):
        make_inpainter(f"diffusers:{sd_dir / 'unet'}")
    fake = tmp_path / "ddpm"
    fake.mkdir()
    (fake / "model_index.json").write_text(json.dumps({"_class_name": "DDPMPipeline", "unet": ["diffusers",
                                                                                              "UNet2DModel"]}))
    with pytest.raises(ModelUnavailableError, match="DDPMPipeline is not an inpainting pipeline"):
        make_inpainter(f"diffusers:{fake}")
    with pytest.raises(InputError, match="unknown dtype"):
        make_inpainter(f"diffusers:{sd_dir}", dtype="float8")
    with pytest.raises(InputError, match="diffusers:MODEL_DIR only"):
        make_inpainter("opencv", steps=10)
    with pytest.raises(InputError, match="diffusers:MODEL_DIR only"):
        make_inpainter("opencv", dtype="float16")


def test_half_precision_weight_variant_loads(sd_dir, tmp_path):
    import shutil

    half = tmp_path / "half"
    shutil.copytree(sd_dir, half)
    for f in list(half.glob("*/*.safetensors")):  # as hub repositories ship fp16-only weights
        f.rename(f.with_name(f.name.replace(".safetensors", ".fp16.safetensors")))
    ip = DiffusersInpainter(str(half), steps=STEPS)
    assert ip.describe()["variant"] == "fp16"
    image, mask = _scene(24, 30), _disc(24, 30, 12, 15, 5)
    np.testing.assert_array_equal(ip.remove(image, mask), DiffusersInpainter(str(sd_dir), steps=STEPS).remove(image,
                                                                                                             mask))


def test_missing_diffusers_keeps_its_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)  # makes `import diffusers` fail
    with pytest.raises(ModelUnavailableError, match="needs the diffusers package"):
        make_inpainter("diffusers:/models/kandinsky")


def test_package_import_does_not_import_diffusers():
    code = ("import sys, editlens, editlens.cli.main, editlens.dice.data.edits, editlens.dice.data.inpaint; "
            "print('diffusers' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# -- the dataset builder, from the CLI and from Python --------------------------------------

def _mcu_grown_box(box: list[float], w: int, h: int, grow: int) -> tuple[slice, slice]:
    """Pixels a change inside ``box`` may reach after JPEG: the box grown by the
    inpainter's ``grow``, widened to the 16-px blocks of 4:2:0 JPEG, plus the
    chroma upsampling's 1 px."""
    x0, y0 = int(box[0] * w) - grow, int(box[1] * h) - grow
    x1, y1 = int(np.ceil(box[2] * w)) + grow, int(np.ceil(box[3] * h)) + grow
    return (slice(max(0, y0 // 16 * 16 - 1), -(-y1 // 16) * 16 + 1),
            slice(max(0, x0 // 16 * 16 - 1), -(-x1 // 16) * 16 + 1))


def test_cli_builds_removals_with_known_boxes(sd_dir, tmp_path):
    from PIL import Image

    from editlens.cli.main import app
    from editlens.dice.data.coco import CocoSet
    from editlens.dice.data.edits import EditConfig, make_edits, mask_box
    from editlens.testing.tiny_coco import make_coco

    ann, imgs = make_coco(tmp_path / "coco", n_images=4, size=(75, 101))
    out = tmp_path / "edits"
    # JPEG 100 for both images: identical input blocks encode identically, so untouched areas compare exactly
    args = ["dice-make-edits", "--annotations", str(ann), "--images", str(imgs), "--out", str(out),
            "--inpainter", f"diffusers:{sd_dir}", "--inpaint-steps", str(STEPS), "--unchanged", "0",
            "--jpeg-min", "100", "--jpeg-max", "100", "--no-progress"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout)
    assert stats["this_run"]["written"] == 4 and stats["by_command"].get("REMOVE", 0) >= 1
    prov = json.loads((out / "provenance.json").read_text())["inpainter"]
    assert prov["backend"] == "diffusers" and prov["steps"] == STEPS and prov["model"] == str(sd_dir)

    coco = CocoSet(ann, imgs)
    by_file = {im.path.name: i for i, im in coco.images.items()}
    rows = [json.loads(x) for x in open(out / "train.jsonl")]
    grow = prov["grow"]
    for row in rows:
        image_id = by_file[row["origin"]["image"]]
        boxes = {(coco.names[int(a["category_id"])], tuple(mask_box(coco.mask(a)))) for a in coco.anns[image_id]}
        src = np.asarray(Image.open(out / row["source"])).astype(int)
        edt = np.asarray(Image.open(out / row["edited"])).astype(int)
        diff = np.abs(src - edt).max(-1)
        reach = np.zeros(diff.shape, bool)
        for d in row["differences"]:
            # each record's box is exactly the box of an annotated object's mask, of its class
            assert (d["object"], tuple(d["box"])) in boxes
            reach[_mcu_grown_box(d["box"], row["width"], row["height"], grow)] = True
            x0, y0, x1, y1 = d["box"]
            inside = diff[int(y0 * row["height"]):int(y1 * row["height"]), int(x0 * row["width"]):int(x1 * row["width"])]
            assert inside.mean() > 10, d  # the object really was erased / repainted there
        assert diff[~reach].max(initial=0) == 0  # nothing else in the picture changed
    removals = [d for row in rows for d in row["differences"] if d["command"] == "REMOVE"]
    assert removals

    # resume: nothing redone
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and json.loads(again.stdout)["this_run"]["written"] == 0
    # from Python, into a fresh folder: the same seed gives the same images
    out2 = tmp_path / "edits2"
    make_edits(EditConfig(str(ann), str(imgs), str(out2), inpainter=f"diffusers:{sd_dir}", inpaint_steps=STEPS,
                          unchanged=0.0, jpeg_range=(100, 100)), progress=False)
    rows2 = [json.loads(x) for x in open(out2 / "train.jsonl")]
    assert [r["differences"] for r in rows2] == [r["differences"] for r in rows]
    for a, b in zip(rows, rows2):
        assert (out / a["edited"]).read_bytes() == (out2 / b["edited"]).read_bytes()
        assert (out / a["source"]).read_bytes() == (out2 / b["source"]).read_bytes()


def test_cli_refuses_diffusers_settings_with_opencv(tmp_path):
    from editlens.cli.main import app
    from editlens.testing.tiny_coco import make_coco

    ann, imgs = make_coco(tmp_path / "coco", n_images=1)
    r = CliRunner().invoke(app, ["dice-make-edits", "--annotations", str(ann), "--images", str(imgs), "--out",
                                 str(tmp_path / "o"), "--inpaint-steps", "10", "--no-progress"])
    assert r.exit_code == 2 and "diffusers:MODEL_DIR only" in r.output
    r = CliRunner().invoke(app, ["dice-make-edits", "--annotations", str(ann), "--images", str(imgs), "--out",
                                 str(tmp_path / "o"), "--inpainter", f"diffusers:{tmp_path / 'none'}", "--no-progress"])
    assert r.exit_code == 2 and "directory not found" in r.output
