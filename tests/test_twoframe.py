"""Two-frame video scoring: preprocessing, checkpoint layout, pooling, retrieval, calibration."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import rng_image


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    from editlens.models.random_init import build_clip

    return build_clip(tmp_path_factory.mktemp("twoframe-clip"))


@pytest.fixture(scope="module")
def tiny(tiny_dir):  # type: ignore[no-untyped-def]
    from editlens.twoframe.model import load_twoframe

    return load_twoframe(tiny_dir, device="cpu", dtype="float32")  # the layout tests compare weights exactly


# ------------------------------------------------------------ preprocessing

def test_vifi_preprocessing_constants():
    from editlens.twoframe.preprocess import IMAGENET_MEAN_255, IMAGENET_STD_255, FramePreprocess

    p = FramePreprocess()
    assert (p.resize, p.crop_size, p.interpolation) == (256, 224, "bilinear-cv2")  # OpenCV, as ViFi-CLIP's mmcv
    assert IMAGENET_MEAN_255 == (123.675, 116.28, 103.53) and IMAGENET_STD_255 == (58.395, 57.12, 57.375)
    assert p.mean == IMAGENET_MEAN_255 and p.std == IMAGENET_STD_255
    # a frame equal to the mean normalises to 0; pure white in channel 0 to (255 - 123.675) / 58.395
    frame = np.empty((256, 256, 3), np.uint8)
    frame[:] = (124, 116, 104)
    frame[0, 0] = (255, 116, 104)
    x = p([frame])
    assert x.shape == (1, 3, 224, 224) and x.dtype == torch.float32
    assert x[0, 0, 100, 100].item() == pytest.approx((124 - 123.675) / 58.395, abs=1e-6)
    assert x[0, 1, 100, 100].item() == pytest.approx((116 - 116.28) / 57.12, abs=1e-6)


def test_short_side_resize_then_centre_crop():
    from editlens.twoframe.preprocess import FramePreprocess

    p = FramePreprocess()
    img = rng_image(0, 256, 512)  # short side already 256: no resize, only the crop
    crop = p.crop(img)
    np.testing.assert_array_equal(crop, img[16:240, 144:368])
    big = rng_image(1, 512, 1024)  # halved to 256 x 512 first
    assert p.crop(big).shape == (224, 224, 3)
    clip = FramePreprocess.for_size(224, "clip")
    assert clip.resize == 224 and clip.mean[0] == pytest.approx(0.48145466 * 255, abs=1e-4)
    assert FramePreprocess.for_size(32).resize == 37  # ViFi's 256/224 ratio at a tiny input size


def test_preprocessing_rejects_bad_frames():
    from editlens.errors import InputError
    from editlens.twoframe.preprocess import FramePreprocess

    with pytest.raises(InputError, match="RGB uint8"):
        FramePreprocess().crop(np.zeros((10, 10), np.uint8))
    with pytest.raises(ValueError, match="resize >= crop_size"):
        FramePreprocess(resize=100, crop_size=224)


# ------------------------------------------------------------ checkpoint layout

def test_vifi_layout_round_trip(tiny, tiny_dir, tmp_path):
    """A CLIP saved exactly as ViFi-CLIP saves it (``model`` entry, ``module.``
    prefix, wrapper names, prompt-learner buffers, no token embedding) loads
    back with every key accounted for and identical outputs."""
    from editlens.errors import ModelUnavailableError
    from editlens.testing.twoframe_models import reference_forward, write_original_checkpoint
    from editlens.twoframe.layout import hf_to_original
    from editlens.twoframe.model import load_twoframe

    path = write_original_checkpoint(tiny.clip, tmp_path / "vifi.pth", style="vifi")
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {"model", "epoch"} and all(k.startswith("module.") for k in raw["model"])
    assert "module.image_encoder.conv1.weight" in raw["model"]
    with pytest.raises(ModelUnavailableError, match="token_embedding"):
        load_twoframe(path, tokenizer=str(tiny_dir), device="cpu", dtype="float32")
    loaded = load_twoframe(path, tokenizer=str(tiny_dir), base=str(tiny_dir), device="cpu", dtype="float32")
    report = loaded.provenance["load"]
    assert report["missing"] == [] and report["unexpected"] == []
    assert report["from_base"] == ["text_model.embeddings.token_embedding.weight"]
    assert report["dropped"] == 2  # the prompt learner's buffers
    assert loaded.preprocess.mean == (123.675, 116.28, 103.53)  # ViFi preprocessing for ViFi weights
    assert loaded.prompt == "vifi" and loaded.prompted(["cat"]) == ["a photo of a cat."]  # ... and its text prompt
    assert tiny.prompt == "raw" and tiny.prompted(["add a cat"]) == ["add a cat"]  # transformers CLIP: as given
    for key, value in tiny.clip.state_dict().items():
        assert torch.equal(value, loaded.clip.state_dict()[key]), key

    pixels = torch.randn(2, 3, 32, 32)
    tok = tiny.tokenizer(["put a cat on the seat", "remove the car"], padding=True, return_tensors="pt")
    with torch.no_grad():
        img = loaded.clip.get_image_features(pixel_values=pixels).pooler_output
        txt = loaded.clip.get_text_features(**tok).pooler_output
    # checked against OpenAI's architecture computed from the original-layout tensors
    ref_img, ref_txt = reference_forward(hf_to_original(tiny.clip.state_dict()), pixels, tok["input_ids"],
                                         tiny.tokenizer.eos_token_id)
    torch.testing.assert_close(img, ref_img, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(txt, ref_txt, atol=1e-5, rtol=1e-5)


def test_original_clip_layout_and_strict_key_accounting(tiny, tiny_dir, tmp_path):
    from editlens.errors import ModelUnavailableError
    from editlens.testing.twoframe_models import write_original_checkpoint
    from editlens.twoframe.model import load_twoframe

    path = write_original_checkpoint(tiny.clip, tmp_path / "clip.pth", style="clip")
    assert "module.visual.conv1.weight" in torch.load(path, weights_only=True)["model"]
    loaded = load_twoframe(path, tokenizer=str(tiny_dir), device="cpu")  # plain layout: no base needed
    cfg = loaded.clip.config
    assert (cfg.vision_config.patch_size, cfg.vision_config.image_size, cfg.vision_config.num_hidden_layers) == (8, 32, 2)

    sd = torch.load(path, weights_only=True)
    sd["model"]["module.visual.extra.weight"] = torch.zeros(3)
    torch.save(sd, tmp_path / "extra.pth")
    with pytest.raises(ModelUnavailableError, match="unexpected: visual.extra.weight"):
        load_twoframe(tmp_path / "extra.pth", tokenizer=str(tiny_dir), device="cpu")
    sd = torch.load(path, weights_only=True)
    del sd["model"]["module.visual.transformer.resblocks.1.mlp.c_fc.bias"]
    torch.save(sd, tmp_path / "partial.pth")
    with pytest.raises(ModelUnavailableError, match="missing: vision_model.encoder.layers.1.mlp.fc1.bias"):
        load_twoframe(tmp_path / "partial.pth", tokenizer=str(tiny_dir), device="cpu")
    with pytest.raises(ModelUnavailableError, match="tokenizer"):
        load_twoframe(path, device="cpu")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelUnavailableError, match="junk.pth: not a readable torch checkpoint"):
        load_twoframe(tmp_path / "junk.pth", tokenizer=str(tiny_dir), device="cpu")


# ------------------------------------------------------------ pooling

def _scores(model, src, edt, text, mode):  # type: ignore[no-untyped-def]
    from editlens.twoframe.scorer import TwoFrameScorer

    return TwoFrameScorer(model).score(["first"], [src], ["second"], [edt], [text], mode=mode)["cosine"][0]


def test_swap_changes_order_aware_score_but_not_faithful(tiny):
    from editlens.twoframe.model import TemporalHead, TwoFrameModel

    torch.manual_seed(0)
    head = TemporalHead(int(tiny.clip.config.projection_dim))
    model = TwoFrameModel(tiny.clip, tiny.tokenizer, tiny.preprocess, "order", head)
    src, edt = rng_image(3, 40, 40), rng_image(4, 40, 40)
    text = "put a cat on the seat"
    # a fresh head's output projection is zero: it starts as exactly the faithful score
    assert _scores(model, src, edt, text, "order") == pytest.approx(_scores(model, src, edt, text, "faithful"), abs=1e-6)
    torch.nn.init.normal_(head.out.weight, std=0.5)  # any trained head
    fwd, back = _scores(model, src, edt, text, "faithful"), _scores(model, edt, src, text, "faithful")
    assert fwd == pytest.approx(back, abs=1e-6)
    o_fwd, o_back = _scores(model, src, edt, text, "order"), _scores(model, edt, src, text, "order")
    assert abs(o_fwd - o_back) > 1e-3


def test_each_unique_frame_encoded_once(tiny):
    from editlens.twoframe.scorer import TwoFrameScorer

    sc = TwoFrameScorer(tiny, batch_size=4, workers=2)  # 3 batches, prepared in threads one batch ahead
    src = rng_image(5, 40, 40)
    edits = [rng_image(10 + i, 40, 40) for i in range(8)]
    out = sc.score(["src"] * 8, [src] * 8, [f"e{i}" for i in range(8)], edits, ["add a red hat"] * 8)
    assert sc.frames_encoded == 9 and out["cosine"].shape == (8,)
    single = TwoFrameScorer(tiny, workers=1).score(["src"], [src], ["e3"], [edits[3]], ["add a red hat"])
    assert out["cosine"][3] == pytest.approx(single["cosine"][0], abs=1e-6)
    assert out["logit"][3] == pytest.approx(out["cosine"][3] * tiny.scale)


# ------------------------------------------------------------ retrieval

def test_retrieval_ranks_on_hand_built_matrix_with_ties():
    from editlens.twoframe.retrieval import retrieval_report

    sim = np.array([[0.9, 0.9, 0.1],   # tie with a wrong candidate: counts against -> rank 2
                    [0.2, 0.5, 0.7],   # one better candidate -> rank 2
                    [0.3, 0.3, 0.3]])  # all tied -> rank 3
    rep = retrieval_report(sim, ["a", "b", "c"], ks=(1, 2, 3))
    v2t = rep["video_to_text"]
    assert rep["ranks_video_to_text"] == [2, 2, 3]
    assert (v2t["recall@1"], v2t["recall@2"], v2t["recall@3"]) == (0.0, pytest.approx(2 / 3), 1.0)
    assert v2t["mean_rank"] == pytest.approx(7 / 3) and v2t["median_rank"] == 2.0
    t2v = rep["text_to_video"]  # columns: text a: 0.9 vs 0.2, 0.3 -> 1; b: 0.5 vs 0.9, 0.3 -> 2; c: 0.3 vs 0.1, 0.7 -> 2
    assert (t2v["recall@1"], t2v["mean_rank"], t2v["median_rank"]) == (pytest.approx(1 / 3), pytest.approx(5 / 3), 2.0)


def test_identical_instructions_are_one_candidate():
    from editlens.twoframe.retrieval import retrieval_report

    sim = np.array([[0.5, 0.9, 0.1], [0.9, 0.5, 0.1], [0.0, 0.0, 0.2]])
    rep = retrieval_report(sim, ["add a hat", "add a hat", "remove it"], ks=(1,))
    # edits 0 and 1 share their instruction: the other's (higher) column is the same text, not a competitor
    assert rep["ranks_video_to_text"] == [1, 1, 1] and rep["pool"] == 2
    with pytest.raises(ValueError, match="n x n"):
        retrieval_report(np.zeros((2, 3)), ["a", "b"])


# ------------------------------------------------------------ calibration

def test_platt_calibration_fits_and_refuses_one_class():
    from editlens.errors import InputError
    from editlens.twoframe.calibration import apply_platt, fit_platt

    rng = np.random.default_rng(0)
    pos, neg = rng.normal(0.3, 0.05, 200), rng.normal(0.1, 0.05, 200)
    cal = fit_platt(np.r_[pos, neg], np.r_[np.ones(200), np.zeros(200)])
    assert cal["a"] > 0
    p = apply_platt(cal, [0.1, 0.2, 0.3])
    assert p[0] < 0.2 and p[1] == pytest.approx(0.5, abs=0.1) and p[2] > 0.8
    with pytest.raises(InputError, match="every label is the same"):
        fit_platt([0.1, 0.2], [1, 1])


class TrainingConfig(dict):
    """Stands in for the yacs config object a ViFi-CLIP run pickles beside its weights."""


class _Touch:
    def __init__(self, path):  # type: ignore[no-untyped-def]
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        from pathlib import Path

        return (Path.touch, (Path(self.path),))


def test_training_checkpoint_with_pickled_objects_loads_without_running_them(tiny, tiny_dir, tmp_path):
    from editlens.testing.twoframe_models import write_original_checkpoint
    from editlens.twoframe.model import load_twoframe

    path = write_original_checkpoint(tiny.clip, tmp_path / "ckpt.pth", style="vifi")
    state = torch.load(path, weights_only=True)
    state["config"] = TrainingConfig(MODEL={"ARCH": "ViT-B/16"})
    state["max_accuracy"] = np.float64(0.8)
    state["side_effect"] = _Touch(tmp_path / "pwned")
    torch.save(state, path)
    with pytest.raises(Exception):  # noqa: B017 - torch raises UnpicklingError or RuntimeError by version
        torch.load(path, weights_only=True)  # what plain safe loading does with such a file
    loaded = load_twoframe(path, tokenizer=str(tiny_dir), base=str(tiny_dir), device="cpu", dtype="float32")
    assert not (tmp_path / "pwned").exists()  # the pickled call was never made
    assert torch.equal(loaded.clip.visual_projection.weight, tiny.clip.visual_projection.weight)


def test_the_text_prompt_is_a_recorded_option(tiny, tiny_dir, tmp_path):
    from editlens.core.types import EditSample
    from editlens.errors import InputError
    from editlens.metrics.registry import create_metric
    from editlens.twoframe.model import load_twoframe

    tiny.save(tmp_path / "ours")
    assert load_twoframe(tmp_path / "ours", device="cpu").prompt == "raw"  # saved with the model
    mine = tmp_path / "prompt.txt"
    mine.write_text("an edit that does this: $instruction")
    assert load_twoframe(tmp_path / "ours", device="cpu", prompt=str(mine)).prompted(["x"]) == ["an edit that does this: x"]
    (tmp_path / "bad.txt").write_text("no placeholder")
    with pytest.raises(InputError, match="needs \\$instruction"):
        load_twoframe(tmp_path / "ours", device="cpu", prompt=str(tmp_path / "bad.txt"))
    sample = EditSample("e", rng_image(1), rng_image(2), "add a cat").load()
    raw = create_metric("twoframe", model=str(tmp_path / "ours"), device="cpu", dtype="float32")([sample])[0]
    vifi = create_metric("twoframe", model=str(tmp_path / "ours"), device="cpu", dtype="float32", prompt="vifi")([sample])[0]
    assert raw.details["prompt"] == "raw" and vifi.details["prompt"] == "vifi" and raw.value != vifi.value
