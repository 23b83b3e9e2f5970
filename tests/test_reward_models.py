"""EditScore and EditReward as evaluators: their answers and scores read as
released, tiny checkpoints in the released layouts loaded strictly, and the
Qwen2.5-VL / Qwen3-VL families in the local backend."""

from __future__ import annotations

import math

import numpy as np
import pytest

from editlens.core.types import EditSample
from editlens.errors import InputError, ModelUnavailableError
from editlens.rewardmodels import common
from editlens.rewardmodels.editscore import combine_passes, official_prompts, pass_scores, read_answer
from editlens.testing import tiny_reward as TR

GOOD = TR.GOOD_ANSWER  # the answer the session's tiny EditScore checkpoints give (tests/conftest.py)


# ------------------------------------------------------------------------------------------- answers and scores

@pytest.mark.parametrize("text,truncated,problem", [
    ("", False, "empty answer"),
    ("   ", False, "empty answer"),
    ("I'm sorry, but I can't assist with that request.", False, "model refused"),
    ("The edit looks natural and follows the instruction well.", False, "no JSON object with a score list"),
    ('{"reasoning": "The hat is', True, "cut off at the token limit inside its JSON"),
    ('{"reasoning": "The hat is', False, "not closed"),
    ("[0, 25]", False, "only repeats the scale [0, 25]"),
    ('{"reasoning": "...", "score": [0, 25]}', False, "only repeats the scale"),
    ('{"reasoning": "ok", "score": [20]}', False, "has 1 score(s), expected 2"),
    ('{"reasoning": "ok", "score": [20, 30]}', False, "outside [0, 25]"),
    ('{"reasoning": "ok", "score": "[20, 25]"}', False, "not a list of numbers"),
    ('{"reasoning": "ok", "score": [true, 3]}', False, "not a list of numbers"),
    ('{"reasoning": "ok"}', False, "no 'score' field"),
    ("From 0 to 25 I give it 20 and 25.", False, "no JSON object"),
])
def test_unreadable_answers_are_never_scored(text, truncated, problem):
    scores, _, why = read_answer(text, 25, truncated)
    assert scores is None and problem in why


@pytest.mark.parametrize("text,scores,reasoning", [
    ('{"reasoning": "hat added", "score": [20, 25]}', [20.0, 25.0], "hat added"),
    ('```json\n{"reasoning": "fine", "score": [3, 4.5]}\n```', [3.0, 4.5], "fine"),
    ("||V^=^V||{'reasoning': 'py style', 'score': [0, 25]}||V^=^V||", [0.0, 25.0], "py style"),  # reasoned: a real 0/25
    ("[7, 8]", [7.0, 8.0], None),
])
def test_readable_answers(text, scores, reasoning):
    assert read_answer(text, 25)[:2] == (scores, reasoning)


def test_scores_as_released():
    p = pass_scores([20, 10], [15, 25], 25)  # divided by scale / 10 = 2.5
    assert p == pytest.approx({"prompt_following": 8.0, "consistency": 4.0, "perceptual_quality": 6.0,
                               "overall": math.sqrt(4.0 * 6.0)})
    q = pass_scores([25, 25], [25, 25], 25)
    last = combine_passes([p, q])
    assert last["overall"] == pytest.approx((math.sqrt(24) + 10) / 2)
    first = combine_passes([p, q], "average_first")  # the release's average_first uses prompt following
    assert first["overall"] == pytest.approx(math.sqrt(9.0 * 8.0))


def test_smart_resize_matches_the_qwen_rule():
    assert common.smart_resize(512, 512, 28, 200704, 200704) == (448, 448)
    h, w = common.smart_resize(480, 640, 28, 200704, 200704)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 200704 and abs(w / h - 4 / 3) < 0.1
    assert common.smart_resize(40, 60, 28, 4 * 28 * 28, 16384 * 28 * 28) == (56, 84)
    with pytest.raises(InputError, match="aspect ratio"):
        common.smart_resize(1, 500, 28, 1, 10**9)


def test_official_prompts_are_parsed_from_a_clone_not_imported(tmp_path):
    mod = tmp_path / "editscore" / "vie_prompts.py"
    mod.parent.mkdir()
    # stand-in strings with the release's structure (the real wording stays in the user's clone)
    mod.write_text('raise SystemExit("never imported")\n'
                   '_context_no_delimit_reasoning_first = "CTX"\n'
                   '_prompts_0shot_two_image_edit_rule = "TWO IMAGES"\n'
                   '_prompts_0shot_tie_rule_SC = "scale 0 to 10: rate <instruction>"\n'
                   '_prompts_0shot_rule_PQ = "PQ from 0 to 10"\n')
    ps = official_prompts(tmp_path, 25)
    assert ps.official and ps.sc_text == "CTX\nTWO IMAGES\nscale 0 to 25: rate <instruction>"
    assert ps.pq_text == "CTX\nPQ from 0 to 25"
    mod.write_text('_context_no_delimit_reasoning_first = "CTX"\n')
    with pytest.raises(InputError, match="missing: _prompts_0shot_two_image_edit_rule"):
        official_prompts(tmp_path, 25)


def test_editreward_official_prompts_and_reading(tmp_path):
    from editlens.rewardmodels.editreward import official_prompts as er_prompts
    from editlens.rewardmodels.editreward import prefer_probability, reading

    d = tmp_path / "EditReward" / "dataset"
    d.mkdir(parents=True)
    (d / "prompts.py").write_text('INSTRUCTION_EDIT_FOLLOWING = "follow: {text_prompt}"\n'
                                  'INSTRUCTION_EDIT_QUALITY = "quality: {text_prompt}"\n')
    (d / "data_collator_qwen_edit.py").write_text('import torch\nprompt_with_special_token = "\\nrate: <|Reward|>\\n"\n')
    ps = er_prompts(tmp_path)
    s = EditSample("x", np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8), "add a hat").load()
    assert ps.parts("instruction_following", s)[2] == "follow: add a hat\nrate: <|Reward|>\n"
    assert "84% sure" in reading(0.3, math.log(0.5)) and "0.707" in reading(0.3, math.log(0.5))
    assert prefer_probability(1.0, 0.0, 0.0, 0.0) == pytest.approx(0.760, abs=1e-3)


# ------------------------------------------------------------------------------------------- tiny checkpoints

def _batch(n=3, instruction="add a hat"):
    return [EditSample(f"s{i}", a, b, instruction).load() for i, (a, b) in enumerate(TR.tiny_edits(n))]


def _editscore(adapter, **kw):
    from editlens.metrics.registry import create_metric

    return create_metric("editscore", model=str(adapter), device="cpu", dtype="float32", **{"max_new_tokens": 8, **kw})


def test_editscore_released_layout_scores_with_reasoning_and_provenance(editscore_dirs, tmp_path):
    base, adapter = editscore_dirs["q25"]
    assert sorted(p.name for p in adapter.iterdir() if p.name != "README.md") == ["adapter_config.json",
                                                                                  "adapter_model.safetensors"]
    ev = _editscore(adapter, cache=str(tmp_path / "c.sqlite"))
    out = ev.score_batch(_batch())
    for s in out:  # SC [20, 25], PQ [20, 25] on 0-25: every field 8 or 10, overall sqrt(8 * 8)
        assert s.status == "scored" and s.value == pytest.approx(8.0)
        d = s.details
        assert (d["prompt_following"], d["consistency"], d["perceptual_quality"]) == pytest.approx((8, 10, 8))
        assert d["reasoning"] == {"SC": "the hat is there", "PQ": "the hat is there"} and d["reward"] == pytest.approx(0.8)
        assert d["release"]["prompts_identical"] is False and d["release"]["adapter"].startswith("sha256:")
    desc = ev.describe()
    assert desc["adapter_merged"] and desc["checkpoint"]["adapter"]["weights"]["adapter_model.safetensors"]
    assert any("wording" in x for x in desc["release"]["differences"])
    be = ev.backend.backend.backend  # cache -> keyed -> local
    assert be.label_images and be.tower_stats.history[-1] == (9, 4)  # 3 x (SC: src + edit, PQ: edit); 4 distinct
    calls = be.calls
    again = _editscore(adapter, cache=str(tmp_path / "c.sqlite")).score_batch(_batch())
    assert [s.value for s in again] == [s.value for s in out] and all(s.details.get("cached") for s in again)
    assert be.calls == calls  # the rerun asked the model nothing


def test_editscore_passes_are_combined_and_unreadable_passes_counted(editscore_dirs):
    _, adapter = editscore_dirs["q25"]
    ev = _editscore(adapter, cache=False, samples=3)
    (s,) = ev.score_batch(_batch(1))
    assert s.details["samples"] == 3 and s.details["unscored_passes"] == 0 and len(s.details["passes"]) == 3
    assert s.details["std"]["overall"] == 0.0
    (cut,) = _editscore(adapter, cache=False, max_new_tokens=1).score_batch(_batch(1))  # the JSON never closes
    assert cut.status == "unscored" and cut.value is None and "cut off" in cut.reason
    assert cut.details["raw"][0]["SC"].startswith('{"reasoning"')


@pytest.mark.parametrize("answer,problem", [(["[0, 25]"], "only repeats the scale"), ([], "empty answer"),
                                            (["I'm sorry, but I can't assist with that request."], "model refused"),
                                            (["The edit looks natural and clean."], "no JSON object")])
def test_editscore_model_answers_that_are_not_ratings_are_unscored(tmp_path, answer, problem):
    _, adapter = TR.build_editscore(tmp_path, "qwen2_5_vl", answer=answer)
    (s,) = _editscore(adapter, cache=False).score_batch(_batch(1))
    assert s.status == "unscored" and s.value is None and problem in s.reason
    assert s.details["raw"][0]["SC"] == "".join(answer) and s.details["unscored_passes"] == 1


def test_editscore_qwen3_uses_the_processor_template(editscore_dirs):
    _, adapter = editscore_dirs["q3"]
    ev = _editscore(adapter, cache=False)
    (s,) = ev.score_batch(_batch(1))
    assert s.value == pytest.approx(8.0) and not ev.backend.label_images


def test_editscore_adapter_loads_strictly(editscore_dirs, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    base, adapter = editscore_dirs["q25"]
    bad = tmp_path / "bad"
    shutil.copytree(adapter, bad)
    sd = load_file(str(bad / "adapter_model.safetensors"))
    k = next(iter(sd))
    extra = dict(sd)
    extra["base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_C.weight"] = sd[k].clone()
    save_file(extra, str(bad / "adapter_model.safetensors"))
    with pytest.raises(ModelUnavailableError, match="1 unexpected"):
        _editscore(bad, cache=False).score_batch(_batch(1))
    del sd[k]
    save_file(sd, str(bad / "adapter_model.safetensors"))
    with pytest.raises(ModelUnavailableError, match="1 LoRA weight"):
        _editscore(bad, cache=False).score_batch(_batch(1))


def test_editscore_adapter_with_older_key_names(tmp_path):
    _, adapter = TR.build_editscore(tmp_path, "qwen2_5_vl", answer=GOOD, old_key_names=True)
    assert any(k.startswith("base_model.model.model.layers.") for k in TR.state_dict_keys(adapter / "adapter_model.safetensors"))
    (s,) = _editscore(adapter, cache=False).score_batch(_batch(1))
    assert s.value == pytest.approx(8.0)


def _editreward(ckpt, base, **kw):
    from editlens.metrics.registry import create_metric

    return create_metric("editreward", model=str(ckpt), base=str(base), device="cpu", dtype="float32",
                         image_pixels=48 * 48, **kw)


def test_editreward_released_layout_reward_and_uncertainty(editreward_dirs, tmp_path):
    base, ckpt = editreward_dirs["q25"]
    assert [p.name for p in ckpt.iterdir()] == ["model.safetensors"]
    keys = TR.state_dict_keys(ckpt / "model.safetensors")
    assert "rm_heads.head_1.5.weight" in keys and "visual.patch_embed.proj.weight" in keys  # older names load too
    ev = _editreward(ckpt, base, cache=str(tmp_path / "r.sqlite"))
    batch = _batch(3)
    out = ev.score_batch(batch)
    for s in out:
        d = s.details
        heads = d["heads"]
        assert s.value == pytest.approx((heads["instruction_following"]["reward"] + heads["visual_quality"]["reward"]) / 2)
        assert d["log_uncertainty"] == pytest.approx(np.mean([h["log_uncertainty"] for h in heads.values()]))
        assert d["sigma"] == pytest.approx(math.exp(d["log_uncertainty"])) and "84% sure" in d["reading"]
        assert d["release"]["positions"] == "1d"
    assert ev._loaded.tower_stats.history[-1] == (12, 4)  # 3 edits x 2 heads x 2 images; 4 distinct images
    assert len({round(s.value, 9) for s in out}) == 3
    one = [ev.score_batch([b])[0] for b in batch]  # cached now: same values
    assert [s.value for s in one] == [s.value for s in out] and all(s.details["cached"] for s in one)
    calls = ev.calls
    fresh = _editreward(ckpt, base, cache=False)
    assert [fresh.score_batch([b])[0].value for b in batch] == pytest.approx([s.value for s in out], abs=1e-5)
    assert ev.calls == calls
    mrope = _editreward(ckpt, base, cache=False, positions="mrope").score_batch(batch[:1])[0]
    assert mrope.value != pytest.approx(out[0].value, abs=1e-7)  # the position quirk is real and recorded
    assert mrope.details["release"]["positions"] == "mrope" and not mrope.details["release"]["format_identical"]


def test_editreward_qwen3_uses_mrope(editreward_dirs):
    base, ckpt = editreward_dirs["q3"]
    (s,) = _editreward(ckpt, base, cache=False).score_batch(_batch(1))
    assert s.status == "scored" and s.details["release"]["positions"] == "mrope"


def test_editreward_qwen3_reward_tensor_sizes_images_by_the_processor_bounds(editreward_dirs):
    """Without image_pixels Qwen3-VL images keep the processor's own bounds; the differentiable reward then
    sizes them the same way and equals the scored reward (images already on the 16-pixel grid)."""
    import torch

    from editlens.metrics.registry import create_metric

    base, ckpt = editreward_dirs["q3"]
    ev = create_metric("editreward", model=str(ckpt), base=str(base), device="cpu", dtype="float32", cache=False)
    batch = [EditSample(f"s{i}", a, b, "add a hat").load() for i, (a, b) in enumerate(TR.tiny_edits(2, size=(32, 48)))]
    scored = [s.value for s in ev.score_batch(batch)]

    def as_tensor(images):
        return torch.stack([torch.from_numpy(a).permute(2, 0, 1).float() / 255 for a in images])

    reward = ev.score_tensor(as_tensor([s.edited for s in batch]), as_tensor([s.source for s in batch]),
                             [s.instruction for s in batch])
    assert reward.shape == (2,) and scored[0] != pytest.approx(scored[1], abs=1e-6)
    np.testing.assert_allclose(reward.detach().numpy(), scored, atol=1e-4)


def test_editreward_loads_strictly(editreward_dirs, tmp_path):
    from safetensors.torch import load_file, save_file

    base, ckpt = editreward_dirs["q3"]
    sd = load_file(str(ckpt / "model.safetensors"))

    def attempt(state, match):
        d = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        save_file(state, str(d / "model.safetensors"))
        with pytest.raises(ModelUnavailableError, match=match):
            _editreward(d, base, cache=False).score_batch(_batch(1))

    attempt({k: v for k, v in sd.items() if k != "model.language_model.norm.weight"}, "1 key.s. missing")
    attempt({**sd, "model.language_model.extra.weight": sd["model.language_model.norm.weight"].clone()}, "1 unexpected")
    attempt({**sd, "rm_heads.head_0.5.weight": sd["rm_heads.head_0.5.weight"][:1].clone()}, "do not chain")
    attempt({k: v for k, v in sd.items() if not k.startswith("rm_heads.head_1")}, "head_0 and rm_heads.head_1")
    emb = "model.language_model.embed_tokens.weight"
    attempt({**sd, emb: sd[emb][:-1].clone(), "lm_head.weight": sd["lm_head.weight"][:-1].clone()},
            "do not belong together")


# ------------------------------------------------------------------------------------------- local backend

@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_qwen_families_in_the_local_backend_encode_each_image_once(tmp_path, family):
    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message

    d = TR.build_qwen_vl(tmp_path / family, family)
    be = TransformersBackend(str(d), device="cpu", dtype="float32", batch_size=8)
    pairs = TR.tiny_edits(3)
    reqs = [ChatRequest([Message("user", [a, b, f"edit {i} done?"])], GenerationSettings(max_new_tokens=3), ("YES", "NO"))
            for i, (a, b) in enumerate(pairs)]
    deduped = be.generate(reqs)
    assert be.tower_stats.history[-1] == (6, 4)
    del be.model.model.visual.forward  # the plain tower
    plain = be.generate(reqs)
    for x, y in zip(deduped, plain):
        assert x.error is None and x.text == y.text
        np.testing.assert_allclose([s.logprob for s in x.steps], [s.logprob for s in y.steps], atol=1e-5)


def test_presets_and_availability():
    from editlens.models.registry import KINDS, availability, presets

    ours = {n: p for n, p in presets().items() if p.kind in ("editscore", "editreward")}
    assert set(ours) == {"editscore-7b", "editscore-72b", "editscore-qwen3-vl-4b", "editscore-qwen3-vl-8b",
                         "editreward-mimo-vl-7b", "editreward-qwen2.5-vl-7b", "editreward-qwen3-vl-8b"}
    assert KINDS["editscore"].loader and KINDS["editreward"].loader
    ok, reason = availability(ours["editscore-7b"])
    assert not ok and "hf download EditScore/EditScore-7B" in reason
    assert presets()["qwen3_vl"].extra["model_class"] == "Qwen3VLForConditionalGeneration"


def test_editscore_in_4bit_keeps_the_adapter_beside_its_base(editscore_dirs):
    pytest.importorskip("bitsandbytes")
    _, adapter = editscore_dirs["q25"]
    ev = _editscore(adapter, cache=False, quantization="nf4")
    (s,) = ev.score_batch(_batch(1))
    assert s.value == pytest.approx(8.0)
    d = ev.describe()
    assert d["quantized_4bit"] and not d["adapter_merged"] and d["weights"]["weights"] == "4-bit NF4"
    assert not d["release"]["format_identical"] and any("unmerged" in x for x in d["release"]["differences"])


def test_top_k_one_sampling_is_the_greedy_answer(tiny_vlm_dirs):
    """EditScore's release samples with top-p/top-k: the shared local backend
    applies them per call (a backend's ``sampling``). With top_k=1 every
    sampled answer must be the greedy one; without it, high-temperature
    samples of a random model differ from it."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message

    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]), device="cpu", dtype="float32")
    ask = lambda t: ChatRequest([Message("user", ["describe the edit"])],  # noqa: E731
                                GenerationSettings(max_new_tokens=12, temperature=t, n=1 if t == 0 else 3, seed=5))
    greedy = be.generate([ask(0.0)])[0].text
    free = be.generate([ask(5.0)])[0].samples
    assert any(s != greedy for s in free)
    be.sampling = {"top_k": 1, "top_p": 0.9}
    assert be.generate([ask(5.0)])[0].samples == [greedy] * 3


def test_editscore_release_reading_scores_what_the_release_scores_and_invents_nothing():
    """--option editscore.answer_reading=release: the answers the strict reading leaves unscored and the
    release scores (EditScore editscore/utils.py mllm_output_to_dict, editscore/__init__.py evaluate) are scored
    as the release scores them; where the release would invent a random integer or fail, still unscored."""
    from editlens.rewardmodels.editscore import read_answer

    cases = {
        '{"reasoning": "fine", "score": [20, 25, 5]}': [20.0, 25.0, 5.0],  # three scores: min() reads them all
        '{"reasoning": "great", "score": [30, 25]}': [30.0, 25.0],  # out of range: no check in the release
        "[0, 25]": [0.0, 25.0],  # the scale echo matches ^\[\d+, ?\d+\]$ and is scored
        "I'm sorry, I cannot rate this. {\"score\": [3, 4]}": [3.0, 4.0],  # refusal phrases are read as text
        "7": [7.0],  # a bare whole number 0-10
    }
    for text, want in cases.items():
        assert read_answer(text, 25)[0] is None  # the strict reading refuses every one
        assert read_answer(text, 25, reading="release", least=1)[0] == want
    # SC needs two (the release reads score[1] and fails on one); PQ one
    assert read_answer('{"score": [12]}', 25, reading="release", least=2)[0] is None
    assert read_answer('{"score": 12}', 25, reading="release", least=1)[0] == [12.0]
    # what the release guesses at random stays unscored, with the reason
    for text in ("I'm sorry, but I can't assist with that request.", "no numbers here", ""):
        scores, _, why = read_answer(text, 25, reading="release", least=1)
        assert scores is None and "unscored here" in why
    assert read_answer('{"score": [-1, 4]}', 25, reading="release")[0] is None


def test_editscore_answer_reading_option_is_checked_and_recorded():
    from editlens.rewardmodels.editscore import EditScoreEvaluator as EditScore

    with pytest.raises(ValueError, match="answer_reading must be one of strict, release"):
        EditScore(engine=None, answer_reading="lenient")
    strict = EditScore(answer_reading="strict").release()
    assert any("answer_reading=release" in n for n in strict["differences"])
    assert not any("answer_reading=release" in n for n in EditScore(answer_reading="release").release()["differences"])
