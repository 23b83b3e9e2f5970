"""Evaluators on an inference engine: DICE and EditScore against `editlens serve`
(a tiny base with LoRA adapters served as model names, over a real socket on
127.0.0.1) give what they give in-process; what an engine lacks stops the run
at start with one message naming the option to set."""

import json
import math

import numpy as np
import pytest

from tests.servers import running


def _edit(seed=1, shape=(40, 56)):
    from editlens.core.types import LoadedEdit

    rng = np.random.default_rng(seed)
    img = lambda: rng.integers(0, 255, (*shape, 3), dtype=np.uint8)  # noqa: E731
    return LoadedEdit(id=f"e{seed}", source=img(), edited=img(), instruction="add a red hat")


#: every engine-path test runs against plain `editlens serve` and its imitations of vLLM and SGLang
ENGINES = [None, "vllm", "sglang"]


def _imitation(imitate, **kw):
    from editlens.backends.imitation import imitation

    return None if imitate is None else imitation(imitate, **kw)


def _serve(base, adapters, merge=False, max_images=None, name="tiny-base", imitate=None, **kw):
    from editlens.backends.engine_api import load_adapter
    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app

    backend = TransformersBackend(str(base))
    served = {n: load_adapter(TransformersBackend(str(base)), d, n, merge=merge) for n, d in adapters.items()}
    return build_app(backend, name, adapters=served, max_images=max_images, imitate=_imitation(imitate, **kw))


@pytest.fixture(scope="module")
def dice_layout(tmp_path_factory):
    from editlens.testing.tiny_dice import build_released_layout

    root = tmp_path_factory.mktemp("released")
    layout = build_released_layout(root)
    preset = {"detector": "{}+{}".format(*layout["detector"]), "coherence": "{}+{}".format(*layout["coherence"]),
              "longest_edge": None, "detector_generation": {"max_new_tokens": 10, "repetition_penalty": 1.5},
              "coherence_generation": {"max_new_tokens": 10, "add_generation_prompt": False}}
    path = root / "preset.json"
    path.write_text(json.dumps(preset))
    # what SGLang can match: no repetition penalty (it penalises generated tokens only) and the generation
    # prompt added (it drops add_generation_prompt: false)
    matched = {**preset, "detector_generation": {"max_new_tokens": 10, "repetition_penalty": 1.0},
               "coherence_generation": {"max_new_tokens": 10, "add_generation_prompt": True}}
    (root / "preset-sglang.json").write_text(json.dumps(matched))
    return layout, path


def _softmax(values):
    m = max(values)
    ex = [math.exp(v - m) for v in values]
    return [e / sum(ex) for e in ex]


def _same_where_returned(la, lb, tol):
    """The candidates' softmax equal at every step where the engine returned all of them."""
    compared = 0
    for da, db in zip(la, lb):
        ids = sorted(da)
        if sorted(db) != ids:
            assert set(db) < set(ids)  # only ever fewer (outside the engine's top-k), never others
            continue
        assert np.allclose(_softmax([da[i] for i in ids]), _softmax([db[i] for i in ids]), atol=tol)
        compared += 1
    return compared


@pytest.mark.parametrize("imitate", ENGINES)
def test_released_dice_on_an_engine_answers_as_in_process(dice_layout, imitate):
    import torch

    from editlens.dice.released import (
        ReleasedDice,
        build_released,
        coherence_conversation,
        detector_conversation,
        load_preset,
    )
    from editlens.dice.types import COMMANDS, DiceResult, Difference

    layout, preset_file = dice_layout
    if imitate == "sglang":  # the settings SGLang can match (the others: test_sglang_differences_are_said_...)
        preset_file = preset_file.parent / "preset-sglang.json"
    local = build_released(str(preset_file))
    base = layout["detector"][0]  # the tiny bases of both stages are the same random model
    sample = _edit()
    app = _serve(base, {"dice-detector": layout["detector"][1], "dice-coherence": layout["coherence"][1]},
                 imitate=imitate)
    with running(app) as url:
        remote = ReleasedDice(load_preset(str(preset_file)), engine=url)
        # the detector's raw generation: same answer, same ADD/EDIT/REMOVE probabilities at every step
        conv = detector_conversation(local.prompts)
        gen = local.preset.detector_generation
        a = local.detector.generate(conv, [sample.source, sample.edited], gen, COMMANDS)
        b = remote.detector.generate(conv, [sample.source, sample.edited], gen, COMMANDS)
        assert a.text == b.text and len(a.step_ids) == len(b.step_ids) > 0
        assert b.variants == a.variants  # first tokens from the engine's /tokenize = the local tokenizer's
        assert b.step_ids == a.step_ids and list(b.offsets) == a.offsets  # offsets from token ids, as in-process
        fp32 = next(local.detector.model.parameters()).dtype == torch.float32
        tol = 1e-4 if fp32 else 3e-2
        compared = _same_where_returned(a.step_logits, b.step_logits, tol)
        if imitate == "sglang":  # its top-20 only: the share of steps it could not give is recorded
            assert "top-20" in b.source and "after the engine's penalties" in b.source
        else:  # exact ids (editlens' extension, vLLM's logprob_token_ids): every step, equal
            assert compared == len(a.step_logits) and "engine ids (exact" in b.source
        # whole runs: same results; the engine is in the provenance
        ra, rb = local.run([sample])[0], remote.run([sample])[0]
        assert (ra.raw, ra.unparsable, ra.problem) == (rb.raw, rb.unparsable, rb.problem)
        assert rb.probability_source["detector"]["source"] == b.source
        for da, db in zip(ra.differences, rb.differences):  # equal where the engine gave the candidates
            if db.confidence is not None:
                assert db.confidence == pytest.approx(da.confidence, abs=tol)
            elif da.confidence is not None:
                assert "not among the log-probabilities the engine returned" in db.confidence_source
        # coherence (no generation prompt, its own adapter): same answer and P(YES) inputs
        res_a, res_b = (DiceResult([Difference("ADD", "a red hat", (0.3, 0.3, 0.6, 0.6))]) for _ in range(2))
        local.judge(sample, res_a)
        remote.judge(sample, res_b)
        assert [v.raw for v in res_a.verdicts] == [v.raw for v in res_b.verdicts]
        assert [v.coherent for v in res_a.verdicts] == [v.coherent for v in res_b.verdicts]
        for va, vb in zip(res_a.verdicts, res_b.verdicts):
            if vb.p_yes is not None or imitate != "sglang":
                assert (vb.p_yes is None) == (va.p_yes is None)
                if va.p_yes is not None:
                    assert vb.p_yes == pytest.approx(va.p_yes, abs=tol)
        conv = coherence_conversation(local.prompts, sample.instruction, "ADD", "a red hat")
        ca = local.coherence.generate(conv, [sample.source, sample.edited], local.preset.coherence_generation,
                                      ("YES", "NO"))
        cb = remote.coherence.generate(conv, [sample.source, sample.edited], local.preset.coherence_generation,
                                       ("YES", "NO"))
        assert ca.text == cb.text and cb.step_ids == ca.step_ids
        _same_where_returned(ca.step_logits, cb.step_logits, tol)
        desc = remote.describe()
        engine = desc["detector"]["engine"]
        assert engine["url"] == url and engine["served_model"] == "dice-detector"
        assert {m["id"] for m in engine["models_answer"]} == {"tiny-base", "dice-detector", "dice-coherence"}
        assert engine["capabilities"]["adapter_of"] == "tiny-base"
        assert desc["identical_to_release"] is False
        assert any("inference engine" in n for n in desc["differences_from_release"])
        if imitate is not None:  # an imitation lists no editlens-only fields
            assert {m["owned_by"] for m in engine["models_answer"]} == {imitate}


def test_sglang_differences_are_said_and_recorded_per_result(dice_layout, caplog):
    """With the release's settings (penalty 1.5 on the detector, no generation prompt for coherence) SGLang
    cannot match: said at start, recorded in every result, the probability source says 'after penalties'."""
    from editlens.dice.released import ReleasedDice, load_preset

    layout, preset_file = dice_layout
    app = _serve(layout["detector"][0], {"dice-detector": layout["detector"][1],
                                         "dice-coherence": layout["coherence"][1]}, imitate="sglang")
    with running(app) as url, caplog.at_level("WARNING", logger="editlens.dice"):
        remote = ReleasedDice(load_preset(str(preset_file)), engine=url)
        said = caplog.text
        res = remote.run([_edit(4)])[0]
    assert "no add_generation_prompt request field" in said and "counts generated tokens only" in said
    notes = res.differences_from_release
    assert any("add_generation_prompt" in n for n in notes) and any("penalty 1.5" in n for n in notes)
    assert "after the engine's penalties" in res.probability_source["detector"]["source"]
    share = res.probability_source["detector"]["missing_share"]
    assert share is None or 0.0 <= share <= 1.0
    assert res.to_dict()["probability_source"] == res.probability_source


def test_vllm_top20_without_candidate_ids_reports_missing_candidates(dice_layout):
    """The old case: a vLLM that returns only its top 20 log-probabilities (before logprob_token_ids). The tiny
    model's vocabulary is larger than 20, so candidates fall outside them: each such confidence is None with the
    reason, and the share of candidate steps that lacked one is recorded; with logprob_token_ids every confidence
    equals in-process."""
    from dataclasses import replace

    from editlens.backends.imitation import imitation
    from editlens.backends.server import build_app
    from editlens.dice.released import ReleasedDice, build_released, load_preset
    from editlens.dice.types import COMMANDS

    layout, preset_file = dice_layout
    local = build_released(str(preset_file))
    old_vllm = replace(imitation("vllm"), logprob_token_ids=False, tokens_as_ids=False)
    from editlens.backends.engine_api import load_adapter
    from editlens.backends.local import TransformersBackend

    base, det = layout["detector"]
    app = build_app(TransformersBackend(str(base)), "tiny-base", imitate=old_vllm,
                    adapters={"dice-detector": load_adapter(TransformersBackend(str(base)), det, "dice-detector")})
    conv_of = __import__("editlens.dice.released", fromlist=["detector_conversation"]).detector_conversation
    missing_seen = 0
    with running(app) as url:
        remote = ReleasedDice(load_preset(str(preset_file)), engine=url, served={"coherence": "none"})
        assert len(local.detector.generate(conv_of(local.prompts), [_edit().source, _edit().edited],
                                           local.preset.detector_generation, COMMANDS).text) > 0
        for seed in range(1, 6):
            sample = _edit(seed)
            conv = conv_of(local.prompts)
            a = local.detector.generate(conv, [sample.source, sample.edited], local.preset.detector_generation,
                                        COMMANDS)
            b = remote.detector.generate(conv, [sample.source, sample.edited], local.preset.detector_generation,
                                         COMMANDS)
            assert a.text == b.text and b.step_ids == a.step_ids  # ids from choice.token_ids
            assert "top-20" in b.source
            _same_where_returned(a.step_logits, b.step_logits, 1e-3)
            missing_seen += sum(1 for da, db in zip(a.step_logits, b.step_logits) if set(db) < set(da))
    assert missing_seen > 0  # the old case happens on this model: some candidate outside the top 20


@pytest.mark.parametrize("imitate", ENGINES)
def test_engine_shortfalls_stop_at_start_naming_the_option(dice_layout, imitate):
    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app
    from editlens.dice.released import ReleasedDice, load_preset
    from editlens.errors import ModelUnavailableError

    layout, preset_file = dice_layout
    base, det = layout["detector"]
    preset = load_preset(str(preset_file))
    with running(_serve(base, {"dice-detector": det}, max_images=1, imitate=imitate)) as url:
        # a served name the engine does not have
        with pytest.raises(ModelUnavailableError, match=r"does not serve a model named 'dice-coherence'.*"
                                                        r"--option dice.engine_detector"):
            ReleasedDice(preset, engine=url, served={"coherence": "none", "detector": "dice-coherence"})
        # one image per prompt (vLLM's default for some models); DICE sends two
        with pytest.raises(ModelUnavailableError, match=r"--limit-mm-per-prompt '\{\"image\": 2\}'"):
            ReleasedDice(preset, engine=url, served={"coherence": "none"})

    class NoLogprobs(TransformersBackend):
        def generate_some(self, reqs, states=None, control=None):
            out = super().generate_some(reqs, states, control)
            for g in out:
                if hasattr(g, "steps"):
                    g.steps = None  # an engine that drops logprobs (as some hosted APIs do)
            return out

    be = NoLogprobs(str(base))
    with running(build_app(be, "dice-detector", imitate=_imitation(imitate))) as url:
        with pytest.raises(ModelUnavailableError, match=r"without logprobs.*--option dice.engine"):
            ReleasedDice(preset, engine=url, served={"coherence": "none"})


@pytest.mark.parametrize("imitate", ENGINES)
@pytest.mark.parametrize("programmed", [True, False])
def test_editscore_on_an_engine_scores_as_in_process(tmp_path, editscore_dirs, programmed, imitate):
    from editlens.metrics.registry import create_metric
    from editlens.testing import tiny_reward as TR

    if programmed:
        base, adapter = editscore_dirs["q25"]
    else:  # a random base: its noise answer depends on every token of the prompt
        base, adapter = TR.build_editscore(tmp_path / "random", "qwen2_5_vl")
    batch = [_edit(1), _edit(2)] if programmed else [_edit(1)]
    tokens = 24 if programmed else 10
    local = create_metric("editscore", model=str(adapter), base=str(base), temperature=0.0, cache=False,
                          max_new_tokens=tokens)
    want = local.score_batch(batch)
    with running(_serve(base, {"editscore": adapter}, merge=True, name="Qwen2.5-VL-tiny", imitate=imitate)) as url:
        remote = create_metric("editscore", engine=url, temperature=0.0, cache=False, max_new_tokens=tokens)
        got = remote.score_batch(batch)
        for a, b in zip(want, got):
            assert (a.value, a.status) == (b.value, b.status)
            assert a.details["passes"] == b.details["passes"]
        if programmed:
            assert got[0].status == "scored" and got[0].value == pytest.approx(8.0)  # sqrt(min(20, 25) / 2.5 * min(20, 25) / 2.5)
        desc = remote.describe()
        assert desc["family"] == "qwen2_5_vl" and desc["engine"]["served_model"] == "editscore"
        assert got[0].details["release"]["served_model"] == "editscore"


@pytest.mark.parametrize("imitate", ENGINES)
def test_editscore_sampled_with_seeds_equals_in_process(editscore_dirs, imitate):
    """Sampled passes with the same seed: equal where the engine honours seeds (editlens serve and vLLM do,
    SGLang with --enable-deterministic-inference; without it the result says the passes are not reproducible)."""
    from editlens.metrics.registry import create_metric

    base, adapter = editscore_dirs["q3"]
    batch = [_edit(3)]
    opts = dict(samples=2, temperature=0.7, seed=5, cache=False, max_new_tokens=24)
    want = create_metric("editscore", model=str(adapter), base=str(base), **opts).score_batch(batch)
    kw = {"deterministic": True} if imitate == "sglang" else {}
    with running(_serve(base, {"editscore": adapter}, merge=True, name="qwen3-vl-tiny", imitate=imitate,
                        **kw)) as url:
        got = create_metric("editscore", engine=url, **opts).score_batch(batch)
    assert [p.get("SC") for p in want[0].details["passes"]] == [p.get("SC") for p in got[0].details["passes"]]
    assert want[0].value == got[0].value
    assert not any("seeds" in n for n in got[0].details["release"]["differences_from_release"])
    if imitate == "sglang":  # the same engine without the flag: said at start and recorded
        with running(_serve(base, {"editscore": adapter}, merge=True, name="qwen3-vl-tiny", imitate=imitate)) as url:
            got = create_metric("editscore", engine=url, **opts).score_batch(batch)
        assert any("--enable-deterministic-inference" in n for n in got[0].details["release"]["differences_from_release"])


@pytest.mark.parametrize("imitate", ["vllm", "sglang"])
def test_omitted_sampling_fields_take_the_models_generation_config(tmp_path, imitate):
    """Both engines fill an omitted sampling field from generation_config.json (here a repetition penalty of
    3): an omitted field answers as the model's value, not as neutral; editlens sends every field, so its
    answer is the neutral one, equal to plain editlens serve's."""
    import httpx

    from editlens.backends.http import OpenAIBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message
    from editlens.testing import tiny_reward as TR

    model = TR.build_qwen_vl(tmp_path / "m", "qwen2_5_vl")
    path = model / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    config.update(repetition_penalty=3.0)
    path.write_text(json.dumps(config))
    text = "Describe the picture in detail, then again."
    req = ChatRequest([Message("user", [text])], GenerationSettings(max_new_tokens=20, top_logprobs=2))

    def ask(url, **fields):
        body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 20,
                "temperature": 0.0, "logprobs": True, "top_logprobs": 2, **fields}
        choice = httpx.post(f"{url}/chat/completions", json=body, timeout=60).json()["choices"][0]
        return choice["message"]["content"], [c["logprob"] for c in choice["logprobs"]["content"]]

    with running(_serve(model, {}, name="tiny", imitate=imitate)) as url:
        be = OpenAIBackend(url)
        assert be.dialect == imitate
        (explicit,) = be.generate([req])  # every field sent: greedy, no penalty
        omitted, penalised, neutral = ask(url), ask(url, repetition_penalty=3.0), ask(url, repetition_penalty=1.0)
    with running(_serve(model, {}, name="tiny")) as url:  # plain editlens serve: no penalty when omitted
        (plain,) = OpenAIBackend(url).generate([req])
    assert omitted == penalised and omitted != neutral  # the model's 3.0 was applied to the omitted field
    assert explicit.text == plain.text == neutral[0]  # editlens' request: the neutral answer, as in-process


def test_vllm_imitation_caps_top_logprobs_and_answers_token_ids(editscore_dirs):
    import httpx

    base, _ = editscore_dirs["q3"]
    msg = [{"role": "user", "content": "Say something."}]
    with running(_serve(base, {}, name="tiny", imitate="vllm")) as url:
        over = httpx.post(f"{url}/chat/completions", json={"model": "tiny", "messages": msg, "max_tokens": 3,
                                                            "logprobs": True, "top_logprobs": 21})
        assert over.status_code == 400 and "greater than max allowed: 20" in over.text
        ok = httpx.post(f"{url}/chat/completions", json={
            "model": "tiny", "messages": msg, "max_tokens": 3, "temperature": 0, "logprobs": True,
            "logprob_token_ids": [5, 7], "return_tokens_as_token_ids": True, "return_token_ids": True,
            "candidates": ["YES"], "logprob_tokens": [5]}).json()
    choice = ok["choices"][0]
    steps = choice["logprobs"]["content"]
    assert len(choice["token_ids"]) == len(steps) > 0
    for tid, step in zip(choice["token_ids"], steps):
        assert step["token"] == f"token_id:{tid}" and "candidates" not in step and "token_logprobs" not in step
        named = {t["token"] for t in step["top_logprobs"]}
        assert {"token_id:5", "token_id:7", f"token_id:{tid}"} == named | {f"token_id:{tid}"} and len(named) <= 3


def test_box_convention_of_an_engine_comes_from_the_served_family():
    from editlens.backends.families import box_convention

    assert box_convention({"model": "Qwen/Qwen2.5-VL-7B-Instruct"}) == "pixels"
    assert box_convention({"model": "judge", "served": json.dumps({"root": "/m/Qwen2-VL-2B-Instruct"})}) == "per-mille"
    assert box_convention({"model": "judge"}) == "fraction"


def test_serve_score_serves_judges_reward_models_and_adiee(tmp_path, tiny_vlm_dirs, editscore_dirs, monkeypatch):
    """`editlens serve --score` with prompted judges (through the served --vlm), EditScore and ADIEE."""
    import base64
    import io

    import httpx
    from PIL import Image
    from typer.testing import CliRunner

    from editlens.adiee.checkpoint import save_released, scorer_from_base
    from editlens.backends import serving
    from editlens.cli.main import app

    ckpt = save_released(scorer_from_base(str(tiny_vlm_dirs["llava_next"]), device="cpu"), tmp_path / "adiee")
    _, adapter = editscore_dirs["q25"]
    apps = []
    monkeypatch.setattr(serving, "serve_app", lambda app_, *a, **k: apps.append(app_))
    res = CliRunner().invoke(app, [
        "serve", "--score", "yes_no,viescore,editscore,adiee", "--vlm", str(tiny_vlm_dirs["idefics3"]),
        "--model", f"editscore={adapter}", "--model", f"adiee={ckpt}", "--option", "editscore.max_new_tokens=24",
        "--option", "adiee.image_side=32", "--option", "adiee.require_token=false", "--cache", "none",
        "--option", "yes_no.max_new_tokens=6", "--option", "viescore.max_new_tokens=6",
        "--port", "0"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    (served,) = apps

    def b64(a):
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    e = _edit(4, (32, 32))
    item = {"source": b64(e.source), "edited": b64(e.edited), "instruction": "add a hat", "task": "motion"}
    with running(served) as url:
        root = url[: -len("/v1")]
        got = {}
        for metric in ("yes_no", "viescore", "editscore", "adiee"):
            n = 8 if metric == "editscore" else 1
            r = httpx.post(f"{root}/v1/score", json={"metric": metric, "items": [item] * n}, timeout=120)
            assert r.status_code == 200, r.text
            got[metric] = r.json()["scores"]
        # the prompted judges answer through the model served here; noise answers are unscored with a reason
        for metric in ("yes_no", "viescore"):
            (s,) = got[metric]
            assert s["status"] in ("scored", "unscored") and (s["status"] == "scored" or s["reason"])
            assert s["decoding"] == "greedy"
        assert [s["value"] for s in got["editscore"]] == [8.0] * 8
        assert got["editscore"][0]["decoding"] == "sampled" and got["editscore"][0]["seed"] == 42
        assert got["adiee"][0]["status"] == "scored" and got["adiee"][0]["decoding"] == "none"
        stats = httpx.get(f"{root}/v1/score/stats").json()["metrics"]
        assert stats["editscore"]["motion"]["flags"] == ["constant"] and stats["editscore"]["motion"]["served"] == 8
        assert stats["adiee"]["motion"]["flags"] == []  # one reward is too few to call it stuck
        # the chat endpoint of the same model is served beside /v1/score
        assert httpx.get(f"{url}/models").json()["data"][0]["id"] == str(tiny_vlm_dirs["idefics3"])
        # a judge served as a reward through an engine (this server): only /v1/score is served
        res = CliRunner().invoke(app, ["serve", "--score", "yes_no", "--vlm", url, "--port", "0", "--cache", "none",
                                       "--option", "yes_no.max_new_tokens=6"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        with running(apps[-1]) as reward_url:
            r = httpx.post(f"{reward_url}/score", json={"items": [item]}, timeout=120)
            assert r.status_code == 200 and r.json()["metric"] == "yes_no"
            assert r.json()["scores"][0] == got["yes_no"][0]  # the same answer in-process and through the engine


def test_reward_stats_flag_stuck_and_constant_tasks():
    from editlens.runner.score_server import MIN_FOR_FLAGS, RewardStats

    stats = RewardStats()
    for k in range(MIN_FOR_FLAGS):
        stats.add("editscore", "motion", 0.0)
        stats.add("editscore", "color", 7.5)
        stats.add("editscore", "add", float(k))
        stats.add("editscore", "broken", None)
    report = stats.report()["metrics"]["editscore"]
    assert report["motion"]["flags"] == ["stuck at 0"] and report["motion"]["zero_fraction"] == 1.0
    assert report["color"]["flags"] == ["constant"] and report["color"]["mean"] == 7.5
    assert report["add"]["flags"] == [] and report["add"]["std"] == pytest.approx(np.std(range(MIN_FOR_FLAGS)))
    assert report["broken"]["flags"] == ["never scored"] and report["broken"]["scored"] == 0


def test_serve_cli_serves_adapters_as_models_with_an_image_limit(dice_layout, monkeypatch):
    import httpx
    from typer.testing import CliRunner

    from editlens.backends import serving
    from editlens.cli.main import app

    layout, _ = dice_layout
    base, det = layout["detector"]
    apps = []
    monkeypatch.setattr(serving, "serve_app", lambda app_, *a, **k: apps.append(app_))
    res = CliRunner().invoke(app, ["serve", "--vlm", str(base), "--name", "idefics3-tiny", "--adapter",
                                   f"dice-detector={det}", "--max-images-per-prompt", "1", "--port", "0"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    bad = CliRunner().invoke(app, ["serve", "--vlm", str(base), "--adapter", "oops", "--port", "0"])
    assert bad.exit_code == 2 and "NAME=DIR" in bad.output
    with running(apps[0]) as url:
        models = {m["id"]: m for m in httpx.get(f"{url}/models").json()["data"]}
        assert models["dice-detector"]["parent"] == "idefics3-tiny" and models["dice-detector"]["root"] == str(det)
        msg = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
        ok = httpx.post(f"{url}/chat/completions", json={"model": "dice-detector", "messages": [msg],
                                                         "max_tokens": 2, "logprobs": True, "top_logprobs": 2})
        assert ok.status_code == 200 and len(ok.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2
        from editlens.backends.wire import image_to_data_url

        img = {"type": "image_url", "image_url": {"url": image_to_data_url(np.zeros((8, 8, 3), np.uint8))}}
        two = {"role": "user", "content": [img, img, {"type": "text", "text": "hi"}]}
        r = httpx.post(f"{url}/chat/completions", json={"model": "dice-detector", "messages": [two], "max_tokens": 2})
        assert r.status_code == 400 and "At most 1 image(s)" in r.json()["error"]["message"]
        r = httpx.post(f"{url}/chat/completions", json={"model": "nope", "messages": [msg], "max_tokens": 2})
        assert r.status_code == 404 and "'dice-detector'" in r.json()["error"]["message"]
        toks = httpx.post(f"{url[:-3]}/tokenize", json={"model": "dice-detector", "prompt": "ADD",
                                                        "add_special_tokens": False}).json()["tokens"]
        text = httpx.post(f"{url[:-3]}/detokenize", json={"model": "dice-detector", "tokens": toks}).json()["prompt"]
        assert text == "ADD"


def test_batched_generation_gives_the_output_layer_contiguous_rows(editscore_dirs):
    """generate() hands the output layer a strided [B, 1, H] slice of the prefill's hidden states. On a
    0.8 B Qwen2.5-VL in bf16 on a CPU, matmul then ran a batched product with the head expanded to
    [B, H, vocab] and copied that expansion (the profiler's largest op: B copies of the head per prefill,
    the reason batched bf16 was no faster than fp32). The local backend gives the head contiguous rows;
    the answers are those of one request at a time."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message

    base, _ = editscore_dirs["q25"]
    be = TransformersBackend(str(base), batch_size=4)
    seen = []
    be.model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: seen.append((tuple(args[0].shape), args[0].is_contiguous())))
    reqs = [ChatRequest([Message("user", [_edit(k, (32, 32)).source, f"describe picture {k}"])],
                        GenerationSettings(max_new_tokens=2)) for k in range(3)]
    batched = be.generate(reqs)
    assert seen and seen[0][0][0] == 3 and all(contiguous for _, contiguous in seen)
    assert [g.text for g in batched] == [be.generate([r])[0].text for r in reqs]


def _tokenizer_app(shape: str):
    """An engine's tokenizer endpoints with a word-level vocabulary, answered as
    vLLM does (root paths, ``/detokenize`` -> ``{"prompt"}``) or as SGLang does
    (``/v1`` paths here, ``/detokenize`` -> ``{"text"}``)."""
    from fastapi import FastAPI, Request

    vocab = {"YES": 11, " YES": 12, "NO": 13, " NO": 14}
    text_of = {v: k for k, v in vocab.items()}
    app = FastAPI()
    prefix = "" if shape == "vllm" else "/v1"

    @app.post(prefix + "/tokenize")
    async def tokenize(request: Request):
        body = await request.json()
        ids = [vocab[body["prompt"]]]
        return {"tokens": ids, "count": len(ids), "max_model_len": 64}

    @app.post(prefix + "/detokenize")
    async def detokenize(request: Request):
        text = "".join(text_of[t] for t in (await request.json())["tokens"])
        return {"prompt": text} if shape == "vllm" else {"text": text}

    return app


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_engine_tokens_reads_vllm_and_sglang_answers(shape):
    from types import SimpleNamespace

    from editlens.backends.engine import engine_tokens

    with running(_tokenizer_app(shape)) as url:
        got = engine_tokens(SimpleNamespace(base_url=url, model_id="m"), ["YES", "NO"])
    assert got == [{"YES": (11, "YES"), "NO": (13, "NO")}, {"YES": (12, " YES"), "NO": (14, " NO")}]


def test_engine_tokens_without_tokenizer_endpoints_names_the_cause():
    from types import SimpleNamespace

    from fastapi import FastAPI

    from editlens.backends.engine import engine_tokens
    from editlens.errors import ModelUnavailableError

    with running(FastAPI()) as url:
        with pytest.raises(ModelUnavailableError, match=r"no usable /tokenize \(HTTP 404"):
            engine_tokens(SimpleNamespace(base_url=url, model_id="m"), ["YES", "NO"])


@pytest.mark.parametrize("imitate", ENGINES)
def test_context_check_of_an_adapter_name_falls_back_to_its_base(editscore_dirs, imitate):
    """vLLM lists no max_model_len for LoRA adapter names: the context check reads the base model's entry."""
    import httpx

    from editlens.backends.engine_api import load_adapter
    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import ServeLimits, build_app
    from editlens.errors import ModelUnavailableError
    from editlens.metrics.registry import create_metric

    base, adapter = editscore_dirs["q3"]
    app = build_app(TransformersBackend(str(base)), "qwen3-vl-tiny", limits=ServeLimits(max_prompt_tokens=100,
                                                                                           max_tokens=50),
                    adapters={"editscore": load_adapter(TransformersBackend(str(base)), adapter, "editscore")},
                    imitate=_imitation(imitate))
    with running(app) as url:
        listed = {m["id"]: m for m in httpx.get(f"{url}/models").json()["data"]}
        assert ("max_model_len" in listed["editscore"]) == (imitate != "vllm")
        with pytest.raises(ModelUnavailableError, match=r"context of 150 tokens.*--max-model-len"):
            create_metric("editscore", engine=url, cache=False, max_new_tokens=400).describe()


@pytest.mark.parametrize("imitate", ENGINES)
def test_yes_no_p_yes_on_an_engine_as_in_process_where_the_engine_returns_both_words(tmp_path, imitate):
    """A model programmed to answer YES: in-process P(YES) from exact logits; on vLLM the YES/NO first tokens are
    asked by id (logprob_token_ids) and P(YES) is equal; SGLang returns its top 20 only, where NO (at a logit
    tied with most of the vocabulary) may be missing: then the result says so, never a made-up number."""
    from editlens.metrics.registry import create_metric
    from editlens.testing import tiny_reward as TR

    base = TR.build_qwen_vl(tmp_path / "yes", "qwen2_5_vl")
    TR.program_answer(base, ["YES"])
    sample = _edit(5)
    local = create_metric("yes_no", vlm=str(base), cache=False, device="cpu").score_batch([sample])[0]
    assert local.value is not None and local.details["p_yes_from"] == "logprobs"
    with running(_serve(base, {}, name="Qwen2.5-VL-yes", imitate=imitate)) as url:
        remote = create_metric("yes_no", vlm=url, cache=False).score_batch([sample])[0]
    source = remote.details["probability_source"]
    if imitate == "sglang":
        assert "top-20" in source and "after the engine's penalties" in source
        if remote.details["p_yes_from"] == "logprobs":
            assert remote.value == pytest.approx(local.value, abs=1e-4)
        else:
            assert "not among the log-probabilities the engine returned" in remote.details["logprobs_unavailable"]
    else:
        assert remote.details["p_yes_from"] == "logprobs"
        assert remote.value == pytest.approx(local.value, abs=1e-4)
        assert ("vLLM logprob_token_ids" in source) if imitate == "vllm" else source.startswith("exact")


@pytest.fixture(scope="module")
def programmed_dice(tmp_path_factory):
    """Tiny DICE models that answer a real difference and a real decision, each with a near-tie rival (EDIT beside
    ADD, NO beside YES), so confidences and P(YES) are not trivially 1."""
    from editlens.testing.tiny_dice import build_programmed_layout

    root = tmp_path_factory.mktemp("programmed")
    layout = build_programmed_layout(root, ["['", "ADD", ": a hat, (0.1, 0.2, 0.6, 0.7)", "']"],
                                     ["Reasoning: the hat is there.\n", "Decision: ", "YES"],
                                     {"ADD": {"EDIT": 0.9}, "YES": {"NO": 0.92}})
    preset = {"detector": "{}+{}".format(*layout["detector"]), "coherence": "{}+{}".format(*layout["coherence"]),
              "longest_edge": None, "detector_generation": {"max_new_tokens": 10, "repetition_penalty": 1.5},
              "coherence_generation": {"max_new_tokens": 12, "add_generation_prompt": False}}
    path = root / "preset.json"
    path.write_text(json.dumps(preset))
    return layout, path


@pytest.mark.parametrize("imitate", ENGINES)
def test_programmed_dice_verdicts_and_confidences_through_each_engine(programmed_dice, imitate):
    """Both stages on plain serve, vLLM and SGLang imitations, with the release's settings: the same difference
    and verdict as in-process; the confidence and P(YES) equal wherever the engine returned every candidate
    (exact ids: always; SGLang's top 20: REMOVE, at a logit tied with the vocabulary, is missing and the
    confidence says so); each result records where its probabilities came from."""
    import torch

    from editlens.dice.released import ReleasedDice, build_released, load_preset

    layout, preset_file = programmed_dice
    local = build_released(str(preset_file))
    sample = _edit(7)
    want = local.run([sample])[0]
    (d_want,) = want.differences
    assert (d_want.command, d_want.object) == ("ADD", "a hat") and 0.5 < d_want.confidence < 0.99
    assert want.verdicts[0].coherent is True and 0.5 < want.verdicts[0].p_yes < 0.99
    fp32 = next(local.detector.model.parameters()).dtype == torch.float32
    tol = 1e-4 if fp32 else 3e-2
    app = _serve(layout["detector"][0], {"dice-detector": layout["detector"][1]}, imitate=imitate)
    coh = _serve(layout["coherence"][0], {"dice-coherence": layout["coherence"][1]}, imitate=imitate)
    with running(app) as url, running(coh) as url2:
        remote = ReleasedDice(load_preset(str(preset_file)), engine=url,
                              served={"coherence": f"dice-coherence@{url2}"})
        got = remote.run([sample])[0]
    (d_got,) = got.differences
    assert (d_got.command, d_got.object, d_got.box) == (d_want.command, d_want.object, d_want.box)
    assert got.verdicts[0].coherent is want.verdicts[0].coherent
    assert got.verdicts[0].p_yes == pytest.approx(want.verdicts[0].p_yes, abs=tol)  # YES and NO both returned
    detector = got.probability_source["detector"]
    if imitate == "sglang":
        assert d_got.confidence is None and "REMOVE not among the log-probabilities" in d_got.confidence_source
        assert detector["missing_share"] == 1.0 and "after the engine's penalties" in detector["source"]
        assert any("add_generation_prompt" in n for n in got.differences_from_release)
    else:
        assert d_got.confidence == pytest.approx(d_want.confidence, abs=tol)
        assert detector["missing_share"] == 0.0 and "engine ids (exact" in detector["source"]
    assert got.probability_source["coherence"]["candidate_steps"] >= 1


def test_serve_cli_imitates_an_engine(dice_layout, monkeypatch):
    """`editlens serve --imitate sglang` answers as SGLang: its owned_by, no editlens field, its
    /get_server_info; --imitate with another name is refused."""
    import httpx
    from typer.testing import CliRunner

    from editlens.backends import serving
    from editlens.cli.main import app

    layout, _ = dice_layout
    base, det = layout["detector"]
    apps = []
    monkeypatch.setattr(serving, "serve_app", lambda app_, *a, **k: apps.append(app_))
    res = CliRunner().invoke(app, ["serve", "--vlm", str(base), "--name", "tiny", "--imitate", "sglang",
                                   "--enable-deterministic-inference", "--port", "0"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    bad = CliRunner().invoke(app, ["serve", "--vlm", str(base), "--imitate", "tgi", "--port", "0"])
    assert bad.exit_code == 2 and "vllm or sglang" in bad.output
    with running(apps[0]) as url:
        assert {m["owned_by"] for m in httpx.get(f"{url}/models").json()["data"]} == {"sglang"}
        assert httpx.get(f"{url[:-3]}/get_server_info").json()["enable_deterministic_inference"] is True
        msg = {"role": "user", "content": "hi"}
        out = httpx.post(f"{url}/chat/completions", json={"model": "tiny", "messages": [msg], "max_tokens": 2,
                                                          "temperature": 0, "logprobs": True, "top_logprobs": 30,
                                                          "candidates": ["YES"], "logprob_tokens": [3]}).json()
        step = out["choices"][0]["logprobs"]["content"][0]
        assert len(step["top_logprobs"]) == 30  # no cap of 20 in SGLang's protocol
        assert "candidates" not in step and "token_logprobs" not in step


def test_every_sampling_field_goes_to_an_engine_and_only_openais_to_other_servers():
    from editlens.backends.types import ChatRequest, GenerationSettings, Message
    from editlens.backends.wire import request_body

    req = ChatRequest([Message("user", ["hi"])], GenerationSettings(max_new_tokens=4, seed=7), ("YES", "NO"),
                      logprob_tokens=(5, 9))
    for dialect in ("editlens", "vllm", "sglang"):
        body = request_body(req, "m", dialect)
        assert (body["temperature"], body["top_p"], body["top_k"], body["repetition_penalty"], body["seed"]) == \
            (0.0, 1.0, -1, 1.0, 7)
        assert body["return_token_ids"] is True
        assert ("logprob_token_ids" in body) == (dialect == "vllm") and ("logprob_tokens" in body) == \
            (dialect == "editlens") and ("candidates" in body) == (dialect == "editlens")
    other = request_body(req, "m", None)
    assert not {"top_k", "top_p", "repetition_penalty", "logprob_token_ids", "candidates"} & set(other)
    assert request_body(req, "m", True) == request_body(req, "m", "editlens")  # the old boolean still works


def test_sampled_judges_on_sglang_say_their_seeds_are_not_used(editscore_dirs, caplog):
    from editlens.metrics.registry import create_metric

    base, _ = editscore_dirs["q3"]
    for deterministic, said in ((False, True), (True, False)):
        with running(_serve(base, {}, name="qwen3-vl-tiny", imitate="sglang", deterministic=deterministic)) as url:
            judge = create_metric("yes_no", vlm=url, samples=2, temperature=0.7, cache=False)
            with caplog.at_level("WARNING", logger="editlens.judges"):
                notes = judge.describe().get("engine_notes", [])
        assert bool(notes) is said and (("--enable-deterministic-inference" in caplog.text) is said or not said)


def test_token_offsets_from_ids_count_special_tokens_and_split_characters_as_in_process(dice_layout):
    """The old drift: per-token string lengths count a special token's text and each half of a split character
    (`[..5,18,19..]` where in-process has `[..5,5,5,6..]`). Offsets from the ids through the engine's
    /detokenize equal in-process's decoded-prefix lengths."""
    from transformers import AutoTokenizer

    from editlens.backends.engine import engine_detokenize
    from editlens.backends.http import OpenAIBackend
    from editlens.dice.released_engine import TokenOffsets

    layout, _ = dice_layout
    base = layout["detector"][0]
    tok = AutoTokenizer.from_pretrained(str(base))
    special = tok.convert_tokens_to_ids("<fake_token_around_image>")
    ids = tok.encode("ADD: a hat ", add_special_tokens=False) + [special] + \
        tok.encode("été, (0.1, 0.2, 0.3, 0.4) 日本", add_special_tokens=False)
    text = tok.decode(ids, skip_special_tokens=True)
    want = [len(tok.decode(ids[:j], skip_special_tokens=True)) for j in range(len(ids))]
    naive, at = [], 0
    for t in ids:
        naive.append(at)
        at += len(tok.decode([t]))
    assert naive != want  # string lengths drift here
    with running(_serve(base, {}, name="tiny-base")) as url:
        be = OpenAIBackend(url)
        offsets = TokenOffsets(ids, text, lambda t: engine_detokenize(be, t))
        assert list(offsets) == want
