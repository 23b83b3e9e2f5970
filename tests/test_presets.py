"""Presets as data: every known model recipe is a JSON file; a new file is a
new preset everywhere (``editlens models``, role defaults, VLM families)."""

import json

import pytest
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.errors import InputError
from editlens.models import registry

runner = CliRunner()


def test_every_shipped_preset_parses_and_names_a_known_kind():
    found = registry.presets()
    assert {"clip", "dino", "dice-idefics3", "adiee-released", "vifi-clip-b16-k400", "idefics3", "qwen2_vl"} <= set(found)
    for p in found.values():
        assert p.kind in registry.KINDS and p.description, p.file
        assert p.file.startswith("editlens/models/presets/")


def test_roles_take_their_default_from_the_preset(monkeypatch):
    from editlens.models.resolve import model_reference

    monkeypatch.delenv("EDITLENS_MODEL_CLIP", raising=False)
    monkeypatch.setenv("EDITLENS_CONFIG", "/nonexistent/config.toml")
    ref = model_reference("clip")
    assert (ref.ref, ref.origin) == ("openai/clip-vit-base-patch32", "default")
    assert model_reference("clip", {"clip": "/x"}).ref == "/x"  # an override still wins


def test_dice_release_preset_is_read_from_its_file():
    from editlens.dice.released import load_preset

    p = load_preset("dice-idefics3")
    assert p.quantization == "nf4" and p.compute_dtype == "float16"
    assert p.detector.adapter.endswith("lora_tuned_stage2/checkpoint-15000")
    assert p.coherence.base == "HuggingFaceM4/Idefics3-8B-Llama3"


def _user_presets(tmp_path, monkeypatch, files):
    d = tmp_path / "presets"
    d.mkdir()
    for name, data in files.items():
        (d / name).write_text(json.dumps(data))
    monkeypatch.setenv("EDITLENS_PRESET_DIR", str(d))
    return d


def test_a_new_preset_file_appears_in_editlens_models(tmp_path, monkeypatch, tiny_clip_dir):
    _user_presets(tmp_path, monkeypatch, {"mine.json": {
        "name": "my-clip", "kind": "clip", "ref": str(tiny_clip_dir), "description": "my own CLIP"},
        "gone.json": {"name": "gone-clip", "kind": "clip", "ref": str(tmp_path / "nowhere"), "description": "x",
                      "source": "ask a colleague"}})
    res = runner.invoke(app, ["models", "--kind", "clip", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["my-clip"]["available"] is True and rows["my-clip"]["unavailable_reason"] is None
    assert rows["gone-clip"]["available"] is False
    assert "nowhere" in rows["gone-clip"]["unavailable_reason"] and "ask a colleague" in rows["gone-clip"]["unavailable_reason"]
    assert set(r["kind"] for r in rows.values()) == {"clip"}
    text = runner.invoke(app, ["models"])
    assert text.exit_code == 0 and "my-clip" in text.output and "gone-clip: " in text.output


def test_a_new_family_file_teaches_the_local_backend_a_model_type(tmp_path, monkeypatch):
    _user_presets(tmp_path, monkeypatch, {"fam.json": {
        "name": "my-idefics", "kind": "vlm-family", "model_type": "my_idefics", "model_class":
        "Idefics3ForConditionalGeneration", "boxes": "pixels", "description": "an Idefics3 under another name"}})
    fam = registry.family_for("my_idefics")
    assert fam.model_class == "Idefics3ForConditionalGeneration" and fam.boxes == "pixels"
    from editlens.backends.families import box_convention

    assert box_convention({"model_type": "my_idefics"}) == "pixels"


@pytest.mark.parametrize("data, message", [
    ({"name": "x", "kind": "clip", "descripton": "typo"}, r"unknown field\(s\) \['descripton'\]"),
    ({"name": "x", "kind": "clipp"}, r"unknown kind 'clipp'; known: .*clip"),
    ({"kind": "clip"}, r"'name' must be a non-empty string"),
    ({"name": "clip", "kind": "clip"}, r"preset 'clip' already exists \(editlens/models/presets/encoders/clip.json\)"),
    ({"name": "f", "kind": "vlm-family", "model_type": "f", "model_class": "X", "boxes": "inches"},
     r"boxes must be one of"),
])
def test_bad_preset_files_are_refused_naming_the_file(tmp_path, monkeypatch, data, message):
    d = _user_presets(tmp_path, monkeypatch, {"bad.json": data})
    with pytest.raises(InputError, match=message) as err:
        registry.presets() if data.get("kind") != "vlm-family" else registry.families()
    assert str(d / "bad.json") in str(err.value)
    res = runner.invoke(app, ["models"])
    assert res.exit_code == 2 and "bad.json" in res.output and "Traceback" not in res.output


def test_unknown_preset_name_suggests_close_ones():
    with pytest.raises(InputError, match="unknown model preset 'dice-idefic3'. Did you mean dice-idefics3"):
        registry.get_preset("dice-idefic3")
    with pytest.raises(InputError, match="is a clip preset, not dice"):
        registry.get_preset("clip", "dice")
