"""Released-style DICE: answer parser, command confidence, decision parser,
centre crop, drawing conventions, prompt files, presets, and base + adapter
loading in the released directory layout."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from editlens.dice.prompt_sets import default_prompts, load_official_prompts
from editlens.dice.released import ModelSpec, Preset, load_preset
from editlens.dice.released_format import (
    CentreCrop,
    assign_command_confidence,
    candidate_variants,
    coherence_images,
    format_released_answer,
    parse_decision,
    parse_released_answer,
    word_probability,
)
from editlens.dice.types import Difference
from editlens.errors import InputError, ModelUnavailableError

CLONE = Path(__file__).parent / "data" / "dice_prompts_clone"


# -- answer parser ---------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    '["ADD: a red hat, (0.1, 0.2, 0.3, 0.4)", "REMOVE: the dog, (0.5, 0.5, 0.9, 1.0)"]',
    "['ADD: a red hat, [0.1, 0.2, 0.3, 0.4]', 'REMOVE: the dog, (0.5, 0.5, 0.9, 1.0)']",
    "Assistant: ['ADD: a red hat,(0.1,0.2,0.3,0.4)', 'REMOVE:the dog, [0.5,0.5,0.9,1.0]']",
    "['ADD: a red hat, (0.1, 0.2, 0.3, 0.4)', 'REMOVE: the dog, (0.5, 0.5, 0.9, 1.0)'",  # truncated list
])
def test_released_answer_variants(text):
    a = parse_released_answer(text)
    assert [(d.command, d.object, d.box) for d in a.differences] == [
        ("ADD", "a red hat", (0.1, 0.2, 0.3, 0.4)), ("REMOVE", "the dog", (0.5, 0.5, 0.9, 1.0))]
    assert not a.no_change and a.problem is None
    for d in a.differences:
        assert text[d.char_offset:].startswith(d.command)


@pytest.mark.parametrize("text", ["['nochange']", '["NoChange"]', "[]", "[ ]", "['no_change: nothing, (0, 0, 0, 0)']"])
def test_no_change_answers_are_empty_not_errors(text):
    a = parse_released_answer(text)
    assert a.differences == [] and a.no_change and a.problem is None


def test_released_answer_failures_and_flags():
    assert parse_released_answer("two cats are sitting").differences is None
    assert parse_released_answer(None).problem.startswith("unparsable")
    a = parse_released_answer("['EDIT: man's hat, (0.6, 0.7, 0.2, 0.3)', 'ADD: cat, (0.1, 0.1, 12, 40)']")
    (d,) = a.differences
    assert d.object == "man's hat" and d.box == (0.2, 0.3, 0.6, 0.7) and d.flags == ["corners swapped"]
    assert len(a.rejected) == 1 and "outside [0, 1]" in a.rejected[0]
    only_bad = parse_released_answer("['ADD: cat, (10, 10, 200, 300)']")
    assert only_bad.differences is None and "outside [0, 1]" in only_bad.problem
    clamped = parse_released_answer("['ADD: cat, (-0.01, 0.2, 1.02, 0.5)']").differences[0]
    assert clamped.box == (0.0, 0.2, 1.0, 0.5) and "clamped to the image" in clamped.flags


def test_format_round_trips_through_parser():
    items = [("ADD", "cat", (0.125, 0.25, 0.5, 0.75)), ("EDIT", "blue car", (0.0, 0.1, 1.0, 0.9))]
    a = parse_released_answer(format_released_answer(items))
    assert [(d.command, d.object, d.box) for d in a.differences] == items
    assert parse_released_answer(format_released_answer([])).no_change


# -- confidence -------------------------------------------------------------------------

IDS = [{"ADD": 11, "REMOVE": 12, "EDIT": 13}]


def test_confidence_is_softmax_over_command_logits_at_the_emitting_step():
    text = "['ADD: cat, (0.1, 0.1, 0.5, 0.5)', 'EDIT: sky, (0, 0, 1, 0.3)']"
    diffs = parse_released_answer(text).differences
    # tokens: "['", "ADD", ": cat, (0.1, 0.1, 0.5, 0.5)', '", "EDIT", ...
    add_at, edit_at = text.index("ADD"), text.index("EDIT")
    offsets = [0, add_at, add_at + 3, edit_at, edit_at + 4]
    step_ids = [5, 11, 6, 13, 7]
    flat = {11: 0.0, 12: 0.0, 13: 0.0}
    logits = [flat, {11: 2.0, 12: 1.0, 13: 0.0}, flat, {11: 0.0, 12: 0.0, 13: math.log(3)}, flat]
    assign_command_confidence(diffs, offsets, step_ids, logits, IDS)
    e = math.e
    assert diffs[0].confidence == pytest.approx(e**2 / (e**2 + e + 1))
    assert diffs[1].confidence == pytest.approx(3 / 5)
    assert diffs[0].confidence_source == "softmax over ADD/EDIT/REMOVE logits"


def test_confidence_unavailable_when_command_not_its_own_token():
    diffs = parse_released_answer("['ADD: cat, (0.1, 0.1, 0.5, 0.5)']").differences
    assign_command_confidence(diffs, [0], [99], [{11: 1.0, 12: 0.0, 13: 0.0}], IDS)
    assert diffs[0].confidence is None and "not emitted" in diffs[0].confidence_source
    assign_command_confidence(diffs, [0], [11], [{11: 1.0}], [])
    assert diffs[0].confidence is None and "distinct" in diffs[0].confidence_source


class _Tok:
    """Bare words are one token each; after a space, YES/NO get their own tokens
    but ADD/EDIT/REMOVE all start with the same space token."""

    table = {"ADD": [11], "REMOVE": [12], "EDIT": [13], " ADD": [1, 11], " REMOVE": [1, 12], " EDIT": [1, 13],
             "YES": [21], "NO": [22], " YES": [31], " NO": [32]}

    def encode(self, text, add_special_tokens=False):
        return self.table[text]


def test_candidate_variants_and_spaced_decision_probability():
    assert candidate_variants(_Tok(), ("ADD", "REMOVE", "EDIT")) == IDS
    v = candidate_variants(_Tok(), ("YES", "NO"))
    assert v == [{"YES": 21, "NO": 22}, {"YES": 31, "NO": 32}]
    logits = {21: 0.0, 22: 0.0, 31: math.log(4), 32: 0.0}
    # "Decision: YES" emits the spaced YES: its variant's logits are used
    assert word_probability("YES", 31, logits, v) == pytest.approx(0.8)
    assert word_probability("NO", 32, logits, v) == pytest.approx(0.2)
    assert word_probability("YES", 22, logits, v) is None


# -- decision ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,want,reason", [
    ('- Reasoning: the hat is there.\n- Decision: "YES"', True, "the hat is there."),
    ("Reasoning: a dog vanished\nDecision: NO", False, "a dog vanished"),
    ("The car turned blue as asked.\nYES", True, "The car turned blue as asked."),
    ("Assistant: - Reasoning: fine.\n- Decision: **NO**", False, "fine."),
])
def test_decision_parser(text, want, reason):
    d = parse_decision(text)
    assert d.coherent is want and d.reasoning == reason
    assert text[d.char_offset:d.char_offset + (3 if want else 2)] == ("YES" if want else "NO")


@pytest.mark.parametrize("text", ["", "maybe, hard to say", "Decision: YES or NO", "Reasoning: unsure"])
def test_decision_parser_refuses_undecided(text):
    assert parse_decision(text).coherent is None and parse_decision(text).problem


# -- crop and drawing -------------------------------------------------------------------

@pytest.mark.parametrize("w,h", [(100, 60), (60, 100), (64, 64), (333, 101)])
def test_centre_crop_box_round_trip(w, h):
    cc = CentreCrop(w, h)
    rng = np.random.default_rng(w * h)
    for _ in range(50):
        # a box inside the crop, in full-image fractions
        a, b = sorted(rng.uniform(0, cc.side, 2))
        c, d = sorted(rng.uniform(0, cc.side, 2))
        box = ((cc.left + a) / w, (cc.top + c) / h, (cc.left + b) / w, (cc.top + d) / h)
        assert cc.from_crop(cc.to_crop(box)) == pytest.approx(box, abs=1e-12)


def test_centre_crop_hand_values():
    cc = CentreCrop(100, 60)
    assert (cc.side, cc.left, cc.top) == (60, 20, 0)
    assert cc.to_crop((0.2, 0.0, 0.8, 1.0)) == pytest.approx((0, 0, 1, 1))
    assert cc.to_crop((0.5, 0.5, 0.65, 1.0)) == pytest.approx((0.5, 0.5, 0.75, 1.0))
    assert cc.to_crop((0.0, 0.0, 0.1, 0.5)) is None  # entirely in the cut-off band
    assert cc.to_crop((0.1, 0.0, 0.5, 0.5)) == pytest.approx((0.0, 0.0, 0.5, 0.5))  # clipped
    img = np.arange(60 * 100 * 3, dtype=np.uint32).reshape(60, 100, 3)
    assert cc.apply(img).shape == (60, 60, 3) and (cc.apply(img)[0, 0] == img[0, 20]).all()


def _coloured(img, rgb):
    return (img == np.array(rgb, dtype=np.uint8)).all(-1)


@pytest.mark.parametrize("convention,command,target", [
    ("released", "EDIT", "edited"), ("paper", "EDIT", "source"), ("released", "ADD", "edited"),
    ("paper", "ADD", "edited"), ("released", "REMOVE", "source"), ("paper", "REMOVE", "source")])
def test_drawing_conventions(convention, command, target):
    grey = np.full((60, 100, 3), 128, np.uint8)
    colour = {"ADD": (255, 0, 0), "EDIT": (0, 255, 0), "REMOVE": (0, 0, 255)}[command]
    d = Difference(command, "x", (0.3, 0.25, 0.7, 0.75))
    src, edt = coherence_images(grey, grey.copy(), d, convention, crop=True, size=None, line=3)
    assert src.shape == edt.shape == (60, 60, 3)
    drawn, clean = (edt, src) if target == "edited" else (src, edt)
    assert not _coloured(clean, colour).any() and (clean == 128).all()
    mask = _coloured(drawn, colour)
    # box (0.3..0.7 of width 100) -> x 30..70 -> crop x 10..50; y 15..45; 3 px wide outline, no fill
    ys, xs = np.nonzero(mask)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (10, 50, 15, 45)
    assert mask[30, 10:13].all() and not mask[30, 13] and not mask[30, 30]


def test_drawing_rejects_unknown_convention():
    with pytest.raises(ValueError, match="convention"):
        coherence_images(np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8),
                         Difference("ADD", "x", (0, 0, 1, 1)), "sideways")


# -- prompts, presets -------------------------------------------------------------------

def test_official_prompts_parsed_without_importing():
    p = load_official_prompts(CLONE)
    # verbatim, with the module's leading and trailing whitespace (the release does not strip them)
    assert p.detect.startswith("\n    Name what differs") and p.coherence_system == "\nCheck one change against the request.\n"
    assert p.coherence_text("add a $5 hat", "ADD: hat") == "\nRequest: add a $5 hat\nChange: ADD: hat\n"
    assert p.source.startswith("official prompts parsed from") and len(p.sha256) == 64
    same = load_official_prompts(CLONE / "editing-evaluation/editing_evaluation/prompts/prompts.py")
    assert same.sha256 == p.sha256


def test_official_prompts_errors_name_what_was_looked_for(tmp_path):
    with pytest.raises(InputError, match="editing_evaluation/prompts/prompts.py"):
        load_official_prompts(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        load_official_prompts(tmp_path / "absent")
    f = tmp_path / "prompts.py"
    f.write_text('PRETRAIN_PROMPT_NOCHANGE = "x"\n')
    with pytest.raises(InputError, match="missing: PROMPT_DIFFERENCE_COHERENCE_SYSTEM, PROMPT_DIFFERENCE_COHERENCE"):
        load_official_prompts(f)
    f.write_text("def broken(:\n")
    with pytest.raises(InputError, match="cannot parse"):
        load_official_prompts(f)


def test_default_prompts_are_ours_and_fill():
    p = default_prompts()
    assert "nochange" in p.detect and "$" not in p.coherence_text("make it red", "EDIT: car")
    assert "make it red" in p.coherence_text("make it red", "EDIT: car")


def test_model_spec_and_presets(tmp_path):
    assert ModelSpec.parse("base/dir+adapter/dir") == ModelSpec("base/dir", "adapter/dir")
    assert ModelSpec.parse("org/model") == ModelSpec("org/model", None)
    with pytest.raises(InputError):
        ModelSpec.parse("base+")
    released = load_preset("dice-idefics3")
    assert released.detector_generation.repetition_penalty == 1.5 and released.longest_edge == 1456
    assert released.quantization == "nf4" and released.drawing == "released"
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"detector": "a+b", "drawing": "paper", "detector_generation": {"max_new_tokens": 9}}))
    p = load_preset(str(f))
    assert p.detector == ModelSpec("a", "b") and p.drawing == "paper" and p.detector_generation.max_new_tokens == 9
    assert Preset.from_dict(p.to_dict()) == p
    f.write_text(json.dumps({"detectr": "a"}))
    with pytest.raises(InputError, match="unknown preset field"):
        load_preset(str(f))
    with pytest.raises(InputError, match="neither a built-in preset"):
        load_preset(str(tmp_path / "nope.json"))


# -- loading the released layout --------------------------------------------------------

@pytest.fixture(scope="module")
def released_root(tmp_path_factory):
    from editlens.testing.tiny_dice import build_released_layout

    root = tmp_path_factory.mktemp("released")
    return root, build_released_layout(root)


def test_released_layout_loads_through_preset(released_root, tmp_path):
    from PIL import Image

    from editlens.core.types import EditSample
    from editlens.dice.released import build_released

    root, layout = released_root
    preset = {"detector": "{}+{}".format(*layout["detector"]), "coherence": "{}+{}".format(*layout["coherence"]),
              "longest_edge": None, "detector_generation": {"max_new_tokens": 12, "repetition_penalty": 1.5},
              "coherence_generation": {"max_new_tokens": 12, "add_generation_prompt": False}}
    (tmp_path / "preset.json").write_text(json.dumps(preset))
    rng = np.random.default_rng(1)
    for n in ("a", "b"):
        Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(tmp_path / f"{n}.png")
    dice = build_released(str(tmp_path / "preset.json"), prompts=str(CLONE))
    from peft import PeftModel

    assert isinstance(dice.detector.model, PeftModel) and isinstance(dice.coherence.model, PeftModel)
    lora = [p for n, p in dice.detector.model.named_parameters() if "lora_B" in n]
    assert lora and all(float(p.abs().sum()) > 0 for p in lora)  # the saved adapter, not a fresh zero one
    (res,) = dice.run([EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "add a cat").load()])
    assert res.detector == "released" and res.raw is not None
    assert res.unparsable == (res.problem is not None and res.problem.startswith("unparsable"))
    # a box in the band the centre crop cuts off is not judged on an unmarked image
    from editlens.dice.types import DiceResult, Difference

    sample = EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "add a cat").load()
    outside = DiceResult([Difference("ADD", "cat", (0.0, 0.1, 0.05, 0.9))])
    dice.judge(sample, outside)
    assert outside.verdicts[0].coherent is None and "outside the centre crop" in outside.verdicts[0].problem
    desc = dice.describe()
    assert desc["identical_to_release"] is False
    if desc["detector"]["device"] == "cpu":  # auto quantises on CUDA only, as the release does there
        assert any("instead of 4-bit NF4" in n for n in desc["differences_from_release"])
    assert desc["prompts"]["source"].startswith("official prompts")


def test_adapter_that_does_not_fit_is_refused(released_root, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from editlens.dice.released import attach_adapter, load_base

    root, layout = released_root
    bad = tmp_path / "bad"
    shutil.copytree(layout["detector"][1], bad)
    weights = load_file(bad / "adapter_model.safetensors")
    dropped = sorted(weights)[0]
    del weights[dropped]
    save_file(weights, bad / "adapter_model.safetensors")
    model = load_base(str(layout["detector"][0]), "cpu", "none", [])
    with pytest.raises(ModelUnavailableError, match="1 LoRA weight"):
        attach_adapter(model, str(bad))
    with pytest.raises(ModelUnavailableError, match="adapter_config.json"):
        attach_adapter(model, str(tmp_path))


def test_base_with_missing_weights_is_refused(released_root, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from editlens.dice.released import load_base

    root, layout = released_root
    bad = tmp_path / "base"
    shutil.copytree(layout["coherence"][0], bad)
    weights = load_file(bad / "model.safetensors")
    name = next(k for k in sorted(weights) if "text_model.layers.1.mlp" in k)
    del weights[name]
    save_file(weights, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelUnavailableError, match="1 weight\\(s\\) missing"):
        load_base(str(bad), "cpu", "none", [])


def test_a_cut_off_answer_is_marked_and_its_last_item_never_silently_dropped(released_root, tmp_path, monkeypatch):
    from editlens.core.types import EditSample
    from editlens.dice.released import RawGeneration, ReleasedModel, build_released
    from editlens.metrics.registry import create_metric

    root, layout = released_root
    text = "['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'REMOVE: the do"
    cut = RawGeneration(text, [1] * 5, [0, 2, 5, 8, 12], [{}] * 5, [{}], finish_reason="length")
    monkeypatch.setattr(ReleasedModel, "generate", lambda self, *a, **k: cut)
    dice = build_released(None, detector="{}+{}".format(*layout["detector"]), quantization="none")
    from PIL import Image

    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / "a.png")
    sample = EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "a.png"), "add a cat").load()
    (res,) = dice.run([sample])
    assert res.truncated and [d.command for d in res.differences] == ["ADD"]
    assert "cut off at 500 new tokens" in res.problem and "'REMOVE: the do'" in res.problem
    assert not res.no_change
    ev = create_metric("dice", dice_detector="{}+{}".format(*layout["detector"]), dice_quantization="none",
                       device="cpu")
    (score,) = ev.compute([sample])
    assert score.status == "unscored" and score.value is None and score.details["truncated"]


def test_confidence_from_the_releases_penalised_scores_is_an_option_and_recorded(released_root):
    from editlens.dice.prompt_sets import default_prompts
    from editlens.dice.released import GenerationPreset, ReleasedModel, detector_conversation, generate_raw
    from editlens.dice.released_format import candidate_variants  # noqa: F401

    root, layout = released_root
    m = ReleasedModel(ModelSpec(*map(str, layout["detector"])), "cpu", "none")
    img = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    conv = detector_conversation(default_prompts())
    gen = GenerationPreset(8, 1.5, True)
    raw = generate_raw(m.model, m.processor, conv, [img, img], gen, ("ADD", "EDIT", "REMOVE"), "cpu", "logits")
    pen = generate_raw(m.model, m.processor, conv, [img, img], gen, ("ADD", "EDIT", "REMOVE"), "cpu", "scores")
    assert raw.step_ids == pen.step_ids  # the same greedy answer ...
    # ... but a candidate already in the prompt (ADD/EDIT/REMOVE are) is penalised in the processed scores
    assert any(a != b for ra, rb in zip(raw.step_logits, pen.step_logits) for a, b in zip(ra.values(), rb.values()))
    with pytest.raises(InputError, match="confidence must be one of"):
        Preset.from_dict({"confidence": "probs"})


def test_dice_masked_clip_runs_with_dices_own_models(released_root, tiny_clip_dir, tmp_path):
    from PIL import Image

    from editlens.core.types import EditSample
    from editlens.errors import ModelUnavailableError
    from editlens.metrics.registry import create_metric

    root, layout = released_root
    with pytest.raises(ModelUnavailableError, match=r"--vlm .*or DICE's own models with --option dice_clip_i.dice_preset"):
        create_metric("dice_clip_i", models={"clip": str(tiny_clip_dir)})
    m = create_metric("dice_clip_i", models={"clip": str(tiny_clip_dir)}, device="cpu",
                      dice_detector="{}+{}".format(*layout["detector"]),
                      dice_coherence="{}+{}".format(*layout["coherence"]), dice_quantization="none")
    rng = np.random.default_rng(3)
    for n in ("a", "b"):
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(tmp_path / f"{n}.png")
    (score,) = m.score_batch([EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "add a cat").load()])
    # random weights: a real value from the released-style models, or honestly unscored with their answer
    assert (score.status == "scored" and -1 <= score.value <= 1) or (score.status == "unscored" and score.details["dice"])
    assert m.describe()["dice"]["detector"]["spec"].startswith(str(layout["detector"][0]))
