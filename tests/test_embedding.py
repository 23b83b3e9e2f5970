"""CLIP/DINO metrics: hand-computed math, and tiny random models loaded
through the real loading code."""

import math

import numpy as np
import pytest
import torch
from helpers import rng_image

from editlens import EditSample, create_metric
from editlens.errors import ModelUnavailableError
from editlens.metrics import functional as F
from editlens.models.encoders import get_encoder
from editlens.runner.selection import select_metrics


def test_clip_directional_hand_computed():
    # normalised embeddings: source image (1,0), edited (0,1) -> change (-1, 1)
    # captions: source (1,0), target (0.6, 0.8) -> change (-0.4, 0.8)
    got = F.clip_directional(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 3.0]]),
                             torch.tensor([[1.0, 0.0]]), torch.tensor([[0.6, 0.8]]))
    expected = (0.4 + 0.8) / (math.sqrt(2) * math.sqrt(0.16 + 0.64))
    assert float(got) == pytest.approx(expected, abs=1e-6)


def test_clip_directional_failed_edit_is_zero_identical_captions_undefined():
    e = torch.tensor([[1.0, 0.0]])
    # nothing changed in the image: a failed edit scores 0, it does not drop out
    assert F.clip_directional(e, e, e, torch.tensor([[0.0, 1.0]])).tolist() == [0.0]
    # no caption change: no direction to compare with
    assert torch.isnan(F.clip_directional(e, torch.tensor([[0.0, 1.0]]), e, e)).all()


def test_clipscore_hessel_weight():
    assert float(F.clipscore(torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0]]))) == pytest.approx(2.5 / math.sqrt(2))
    assert float(F.clipscore(torch.tensor([[1.0, 0.0]]), torch.tensor([[-1.0, 0.0]]))) == 0.0


def _sample(i, caps=True, src=None):
    src = rng_image(100) if src is None else src
    return EditSample(f"s{i}", src, rng_image(i), "make it different",
                      source_caption="a photo of a cat" if caps else None,
                      target_caption="a photo of a dog" if caps else None).load()


def test_clip_metrics_with_tiny_model(tiny_clip_dir):
    models = {"clip": str(tiny_clip_dir)}
    batch = [_sample(i) for i in range(4)] + [_sample(9, caps=False)]
    out = {n: create_metric(n, models=models)(batch) for n in ("clip_i", "clip_t", "clip_d", "clipscore")}
    # recompute by hand with the same encoder
    enc = get_encoder("clip", overrides=models)
    src = enc.encode_images([s.source for s in batch])
    edt = enc.encode_images([s.edited for s in batch])
    txt_s = enc.encode_texts(["a photo of a cat"] * 5)
    txt_t = enc.encode_texts(["a photo of a dog"] * 5)
    np.testing.assert_allclose([s.value for s in out["clip_i"]], F.cosine(src, edt).numpy(), atol=1e-6)
    np.testing.assert_allclose([s.value for s in out["clip_t"][:4]], F.cosine(edt, txt_t)[:4].numpy(), atol=1e-6)
    np.testing.assert_allclose([s.value for s in out["clip_d"][:4]],
                               F.clip_directional(src, edt, txt_s, txt_t)[:4].numpy(), atol=1e-6)
    for name in ("clip_t", "clip_d", "clipscore"):
        assert out[name][4].status == "skipped" and "caption" in out[name][4].reason


def test_identical_images_have_clip_i_one(tiny_clip_dir):
    a = rng_image(3)
    sc = create_metric("clip_i", models={"clip": str(tiny_clip_dir)})([EditSample("x", a, a, "noop").load()])[0]
    assert sc.value == pytest.approx(1.0, abs=1e-6)


def test_shared_source_encoded_once(tiny_clip_dir):
    models = {"clip": str(tiny_clip_dir)}
    batch = [_sample(i) for i in range(8)]  # 8 edits of one source
    create_metric("clip_i", models=models)(batch)
    create_metric("clip_t", models=models)(batch)  # reuses the edited embeddings
    enc = get_encoder("clip", overrides=models)
    assert enc.image_cache.misses == 9  # 1 source + 8 edited
    assert enc.text_cache.misses == 1


def test_dino_i_with_tiny_model(tiny_dino_dir):
    a, b = rng_image(1), rng_image(2)
    m = create_metric("dino_i", models={"dino": str(tiny_dino_dir)})
    same, diff = m([EditSample("x", a, a, "n").load(), EditSample("y", a, b, "n").load()])
    assert same.value == pytest.approx(1.0, abs=1e-6)
    assert -1.0 <= diff.value < 1.0


def test_masked_clip_patches_excluded_region(tiny_clip_dir):
    src = rng_image(5)
    edt = src.copy()
    edt[:24] = 0  # top half changed
    s = EditSample("x", src, edt, "n", metadata={"boxes": [[0, 0, 1, 0.5]]}).load()
    m = create_metric("clip_i", region="outside", models={"clip": str(tiny_clip_dir)})
    assert m([s])[0].value == pytest.approx(1.0, abs=1e-6)  # outside the box both images are equal


def test_missing_model_message_is_actionable(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError) as err:
        select_metrics(["clip_i"], models={"clip": "someone/not-cached-model"})
    msg = str(err.value)
    assert "someone/not-cached-model" in msg and "hf download someone/not-cached-model" in msg
    assert "--model clip=DIR" in msg and "EDITLENS_MODEL_CLIP" in msg


def test_missing_local_dir_message(tmp_path):
    enc_dir = tmp_path / "nothing-here"
    m = create_metric("clip_i", models={"clip": str(enc_dir)})
    with pytest.raises(ModelUnavailableError, match="nothing-here"):
        m([EditSample("x", rng_image(0), rng_image(1), "n").load()])


def test_defaults_skip_unavailable_models_with_reason(monkeypatch):
    monkeypatch.setenv("EDITLENS_MODEL_CLIP", "/definitely/not/here")
    monkeypatch.setenv("EDITLENS_MODEL_DINO", "/definitely/not/here")
    sel = select_metrics(None)
    names = [m.name for m in sel.metrics]
    skipped = dict(sel.skipped)
    assert "change_map" in names and "ssim" in names
    assert "clip_i" in skipped and "/definitely/not/here" in skipped["clip_i"]


def test_env_var_resolves_model(tiny_clip_dir, monkeypatch):
    monkeypatch.setenv("EDITLENS_MODEL_CLIP", str(tiny_clip_dir))
    sel = select_metrics(["clip_i"])
    a = rng_image(0)
    assert sel.metrics[0]([EditSample("x", a, a, "n").load()])[0].value == pytest.approx(1.0, abs=1e-6)


def test_manifest_records_weight_hashes(tiny_clip_dir, tmp_path, monkeypatch):
    import hashlib
    import json

    from editlens.runner.run import run_evaluation

    monkeypatch.setenv("EDITLENS_CACHE_DIR", str(tmp_path / "cache"))
    a = rng_image(0)
    run_evaluation([EditSample("x", a, a, "n")], [create_metric("clip_i", models={"clip": str(tiny_clip_dir)})],
                   tmp_path / "run", progress=False)
    model = json.load(open(tmp_path / "run" / "manifest.json"))["evaluators"][0]["model"]
    weights = tiny_clip_dir / "model.safetensors"
    assert model["path"] == str(tiny_clip_dir.resolve()) and model["origin"] == "override"
    assert model["weights"]["model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert (tmp_path / "cache" / "file_hashes.json").is_file()


def test_user_config_file_resolves_roles(tmp_path, monkeypatch, tiny_dino_dir):
    from editlens.models.resolve import model_reference

    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[models]\ndino = "{tiny_dino_dir}"\n')
    monkeypatch.setenv("EDITLENS_CONFIG", str(cfg))
    monkeypatch.delenv("EDITLENS_MODEL_DINO", raising=False)
    ref = model_reference("dino")
    assert ref.ref == str(tiny_dino_dir) and ref.origin == "config"
    monkeypatch.setenv("EDITLENS_MODEL_DINO", "/env/wins")
    assert model_reference("dino").origin == "env"
    assert model_reference("dino", {"dino": "/override/wins"}).ref == "/override/wins"
    a = rng_image(0)
    monkeypatch.delenv("EDITLENS_MODEL_DINO")
    assert create_metric("dino_i")([EditSample("x", a, a, "n").load()])[0].value == pytest.approx(1.0, abs=1e-6)
