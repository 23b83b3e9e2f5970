"""editlens.json: every exporter says what its folder holds, and the model door reads it first
(folders saved before it are still told by adiee.json / twoframe.json)."""

from __future__ import annotations

import json

import pytest

from editlens.errors import InputError


def _described(folder):  # type: ignore[no-untyped-def]
    return json.loads((folder / "editlens.json").read_text())


def test_infer_kind_reads_editlens_json_first(tmp_path):
    from editlens import __version__
    from editlens.models.describe import write_description
    from editlens.models.loader import infer_kind

    folder = tmp_path / "m"
    folder.mkdir()
    # a config.json that alone would say "clip": the description wins
    (folder / "config.json").write_text(json.dumps({"model_type": "clip"}))
    assert infer_kind(str(folder)) == "clip"
    write_description(folder, "twoframe", "editlens.twoframe.model:TwoFrameModel", format="x")
    assert _described(folder) == {"kind": "twoframe", "class": "editlens.twoframe.model:TwoFrameModel",
                                  "editlens_version": __version__, "format": "x"}
    assert infer_kind(str(folder)) == "twoframe"
    assert infer_kind(f"{folder}+some/adapter") == "twoframe"  # BASE+ADAPTER: the base's files say


def test_an_unknown_or_broken_description_is_a_clear_error(tmp_path):
    from editlens.models.describe import write_description
    from editlens.models.loader import infer_kind, load_model

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "editlens.json").write_text(json.dumps({"kind": "hologram", "editlens_version": "9.0"}))
    with pytest.raises(InputError, match=r"m/editlens.json: unknown kind 'hologram' \(known: adiee, .*twoframe.*\); "
                                         r"written by editlens 9.0; upgrade editlens, or pass kind="):
        infer_kind(str(folder))
    with pytest.raises(InputError, match="unknown kind 'hologram'"):
        load_model(str(folder), device="cpu")
    (folder / "editlens.json").write_text('{"kind": "adiee"')
    with pytest.raises(InputError, match=r"m/editlens.json: not valid JSON \(what the folder holds\)"):
        infer_kind(str(folder))
    (folder / "editlens.json").write_text(json.dumps(["adiee"]))
    with pytest.raises(InputError, match="m/editlens.json: expected a JSON object .* got list"):
        infer_kind(str(folder))
    (folder / "editlens.json").write_text(json.dumps({"class": "x"}))
    with pytest.raises(InputError, match="m/editlens.json: no 'kind'"):
        infer_kind(str(folder))
    with pytest.raises(ValueError, match="unknown model kind 'hologram'"):  # an exporter never writes one
        write_description(folder, "hologram", "x:Y")


def test_a_broken_config_json_names_the_file(tmp_path):
    from editlens.models.loader import infer_kind

    (tmp_path / "config.json").write_text("{")
    with pytest.raises(InputError, match=r"config.json: not valid JSON \(the model's config\)"):
        infer_kind(str(tmp_path))


def test_twoframe_export_describes_itself_and_old_folders_still_load(tmp_path):
    from editlens.models.loader import infer_kind
    from editlens.models.random_init import build_clip
    from editlens.twoframe.model import load_twoframe

    model = load_twoframe(build_clip(tmp_path / "clip"), device="cpu", dtype="float32")
    out = model.save(tmp_path / "tf")
    described = _described(out)
    assert described["kind"] == "twoframe" and described["class"] == "editlens.twoframe.model:TwoFrameModel"
    assert described["format"] == json.loads((out / "twoframe.json").read_text())["format"]
    assert infer_kind(str(out)) == "twoframe"
    (out / "editlens.json").unlink()  # a folder saved before editlens.json
    assert infer_kind(str(out)) == "twoframe"


def test_tiny_editor_describes_itself(tmp_path):
    from editlens.editors.random_init import make_tiny_editor
    from editlens.models.loader import infer_kind

    out = make_tiny_editor(tmp_path / "ed", "instruct-pix2pix", image_size=16)
    assert _described(out)["kind"] == "editor" and _described(out)["family"] == "instruct-pix2pix"
    assert infer_kind(str(out)) == "editor"


def test_adiee_exports_describe_themselves_and_load_through_the_one_vlm_loader(tiny_vlm_dirs, tmp_path):
    """Both layouts write editlens.json; the released one is rebuilt from its state dict and ours gets its
    adapter strictly (models.vlm), a damaged adapter refused naming the checkpoint."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file

    from editlens.adiee.checkpoint import CheckpointError, load_scorer, save_ours, save_released, scorer_from_base
    from editlens.models.loader import infer_kind

    base = str(tiny_vlm_dirs["idefics3"])
    scorer = scorer_from_base(base, head="regression", device="cpu", dtype="float32")
    rel = save_released(scorer, tmp_path / "rel")
    assert _described(rel)["kind"] == "adiee" and _described(rel)["format"] == "released"
    assert _described(rel)["class"] == "editlens.adiee.model:AdieeScorer"
    assert infer_kind(str(rel)) == "adiee"
    loaded, rep, _ = load_scorer(rel, device="cpu", dtype="float32")
    assert rep.missing == rep.unexpected == rep.mismatched == []
    assert torch.equal(loaded.score_decoder[0].weight, scorer.score_decoder[0].weight)

    torch.manual_seed(0)
    scorer.vlm = get_peft_model(scorer.vlm, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                       init_lora_weights=False))
    ours = save_ours(scorer, tmp_path / "ours", base=base)
    assert _described(ours)["kind"] == "adiee" and _described(ours)["format"] == "ours"
    (ours / "editlens.json").unlink()  # a folder saved before editlens.json: adiee.json still says
    assert infer_kind(str(ours)) == "adiee"
    loaded, rep, _ = load_scorer(ours, device="cpu", dtype="float32")
    saved = load_file(str(ours / "adapter_model.safetensors"))
    got = {k: v for k, v in loaded.vlm.state_dict().items() if "lora_" in k}
    assert len(got) == len(saved) > 0
    key = next(iter(saved))
    assert any(torch.equal(v, saved[key]) for v in got.values())  # the trained (non-zero) adapter, not a fresh one
    save_file({k: v for i, (k, v) in enumerate(saved.items()) if i > 0}, str(ours / "adapter_model.safetensors"))
    with pytest.raises(CheckpointError, match=r"ours: the adapter does not fit the base model: 1 LoRA weight"):
        load_scorer(ours, device="cpu", dtype="float32")
