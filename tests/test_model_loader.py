"""One door to every model: load_model resolves roles, presets and folders,
reads what a folder is from its own files, asks the precision policy, and
shares each loaded model through the pool."""

import json

import pytest
import torch

from editlens.errors import InputError
from editlens.models import pool
from editlens.models.loader import infer_kind, load_model


def test_a_folder_says_what_it_is(tiny_clip_dir, tiny_dino_dir, tmp_path):
    assert infer_kind(str(tiny_clip_dir)) == "clip" and infer_kind(str(tiny_dino_dir)) == "dino"
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf" / "twoframe.json").write_text("{}")
    assert infer_kind(str(tmp_path / "tf")) == "twoframe"
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(InputError, match="a 'bert' model, which no editlens kind loads; pass kind="):
        infer_kind(str(tmp_path / "bert"))
    (tmp_path / "w.pth").write_bytes(b"x")
    with pytest.raises(InputError, match="a checkpoint file does not say what it is; pass kind= .*twoframe"):
        infer_kind(str(tmp_path / "w.pth"))


def test_loaded_once_per_settings_and_in_the_policys_dtype(tiny_clip_dir):
    a = load_model(str(tiny_clip_dir), dtype="float32", device="cpu")
    assert load_model(str(tiny_clip_dir), dtype="float32", device="cpu") is a  # from the pool
    b = load_model(str(tiny_clip_dir), dtype="bfloat16", device="cpu")
    assert b is not a and b.model.dtype == torch.bfloat16 and a.model.dtype == torch.float32
    assert load_model(str(tiny_clip_dir), dtype="float32", device="cpu", shared=False) is not a
    assert len(pool.loaded("clip")) == 2


def test_roles_and_presets_resolve_through_the_same_door(tiny_clip_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITLENS_MODEL_CLIP", str(tiny_clip_dir))
    enc = load_model("clip", dtype="float32", device="cpu")  # the role (and preset) "clip", overridden by env
    assert enc.mref.ref == str(tiny_clip_dir) and enc.mref.origin == "env"
    monkeypatch.delenv("EDITLENS_MODEL_CLIP")
    d = tmp_path / "presets"
    d.mkdir()
    (d / "mine.json").write_text(json.dumps({"name": "team-clip", "kind": "clip", "ref": str(tiny_clip_dir),
                                             "description": "the team's CLIP"}))
    monkeypatch.setenv("EDITLENS_PRESET_DIR", str(d))
    assert load_model("team-clip", dtype="float32", device="cpu").mref.ref == str(tiny_clip_dir)


def test_a_kind_that_cannot_be_quantised_says_so(tiny_clip_dir):
    from editlens.errors import ModelUnavailableError

    with pytest.raises(ModelUnavailableError, match="CLIP encoders load unquantised"):
        load_model(str(tiny_clip_dir), quantization="nf4", device="cpu")


def test_metrics_and_the_loader_share_one_instance(tiny_clip_dir):
    from editlens import create_metric

    m = create_metric("clip_i", models={"clip": str(tiny_clip_dir)}, dtype="float32", device="cpu")
    assert m.encoder is load_model("clip", models={"clip": str(tiny_clip_dir)}, kind="clip", dtype="float32",
                                   device="cpu")
