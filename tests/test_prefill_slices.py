"""Long prompts prefilled in slices (``editlens serve --prefill-tokens``): the
answers of an unsliced prefill, and other clients served between two slices."""

from __future__ import annotations

import pytest
from helpers import rng_image

from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message


def _run_to_the_end(be, reqs, control):  # type: ignore[no-untyped-def]
    """``generate_some`` called until every request is answered; the sliced
    plan and prompt of the first prefill seen."""
    from editlens.backends.stepping import Paused

    states, done, plan, calls = [None] * len(reqs), [None] * len(reqs), None, 0
    while any(d is None for d in done):
        todo = [i for i, d in enumerate(done) if d is None]
        out = be.generate_some([reqs[i] for i in todo], [states[i] for i in todo], control)
        calls += 1
        for i, o in zip(todo, out):
            if isinstance(o, Paused):
                states[i] = o
                if plan is None and o.group is not None and o.group.prefill is not None:
                    plan = (list(o.group.prefill.ends), o.group.prompt["input_ids"])
            else:
                done[i] = o
    return done, plan, calls


@pytest.mark.parametrize("family,pre_encoded", [("idefics3", True), ("qwen2_vl", True), ("llava_next", True),
                                                 ("qwen2_vl", False),
                                                 ("qwen2_5_vl+lora", True)])
def test_sliced_prefill_answers_as_one_prefill(request, family, pre_encoded, monkeypatch):
    """A batch of image prompts prefilled 16 tokens at a time, the model yielded after every
    slice and token: the greedy answers and log-probabilities of one unsliced prefill. Where
    transformers pre-encodes the images a slice boundary falls inside an image's tokens;
    without it (forced off) every image token stays in one slice. A served LoRA adapter
    (a PEFT-wrapped model, EditScore's layout) slices the same way."""
    from editlens.backends import stepping
    from editlens.backends.local import TransformersBackend
    from editlens.backends.stepping import Control

    if family.endswith("+lora"):
        from editlens.backends.engine_api import load_adapter

        base, adapter = request.getfixturevalue("editscore_dirs")["q25"]
        be = load_adapter(TransformersBackend(str(base), batch_size=4), adapter, "lora")
    else:
        be = TransformersBackend(str(request.getfixturevalue("tiny_vlm_dirs")[family]), batch_size=4)
    if not pre_encoded:
        monkeypatch.setattr(stepping, "_pre_encodes", lambda model: False)
    settings = GenerationSettings(max_new_tokens=6, top_logprobs=2)
    reqs = [ChatRequest([Message("user", ["Look " * (3 + 5 * i), rng_image(i, 40, 48), f"What changed {i}?" * (i + 1)])],
                        settings) for i in range(2)]
    whole = be.generate(reqs)
    sliced, plan, calls = _run_to_the_end(be, reqs, Control(pause=lambda: True, prefill_tokens=16))
    assert plan is not None and calls > len(plan[0])  # one call per slice, then per token
    ends, ids = plan
    assert all(b - a <= 16 for a, b in zip([0, *ends], ends)) or not pre_encoded
    image = ids == be.model.config.image_token_id
    straddled = [e for e in ends if bool((image[:, e - 1] & image[:, e]).any())]
    assert bool(straddled) == pre_encoded, (ends, straddled)
    for got, want in zip(sliced, whole):
        assert got.error is None and got.text == want.text
        assert [s.logprob for s in got.steps] == pytest.approx([s.logprob for s in want.steps], abs=1e-4)
        assert got.usage["prompt_tokens"] == want.usage["prompt_tokens"]


def test_slice_plan_leaves_generate_a_text_only_rest():
    from editlens.backends.stepping import _slice_ends

    assert _slice_ends(100, 40, [], True) == [40, 80]
    assert _slice_ends(100, 40, [85, 86], True) == [40, 80, 87]  # the images' tokens all in the cache first
    assert _slice_ends(100, 40, list(range(30, 75)), False) == [75]  # no end inside the images' tokens
    assert _slice_ends(100, 40, [99], True) == []  # nothing text-only left: one prefill
    assert _slice_ends(40, 40, [], True) == []


def test_a_short_request_is_answered_between_two_slices_of_a_long_prefill(tiny_vlm_dirs):
    """The short request arrives once the long prompt's first slice ran; the scheduler's
    record shows it answered before the long prompt's last slice (no clock involved)."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.scheduler import Batcher

    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=4)
    long_req = ChatRequest([Message("user", ["Describe every change in detail. " * 8])],
                           GenerationSettings(max_new_tokens=3))
    short_req = ChatRequest([Message("user", ["hi"])], GenerationSettings(max_new_tokens=2))
    n_long = be.count_prompt_tokens(long_req)
    assert n_long > 8 * 16
    sent: list = []
    plain = be.generate_some

    def generate_some(reqs, states=None, control=None):  # type: ignore[no-untyped-def]
        if control is None:  # be.generate, below
            return plain(reqs, states, control)
        inner = control.on_prefill

        def on_prefill(i, encoded, total):  # type: ignore[no-untyped-def]
            inner(i, encoded, total)
            if not sent:  # the long prefill is under way: a short client arrives
                sent.append(batcher.enqueue(short_req, prompt_tokens=be.count_prompt_tokens(short_req)))

        control.on_prefill = on_prefill
        return plain(reqs, states, control)

    be.generate_some = generate_some  # type: ignore[method-assign]
    batcher = Batcher(be, window_ms=0, slice_ms=0, prefill_tokens=16)
    try:
        long_job = batcher.enqueue(long_req, prompt_tokens=n_long)
        long_gen = long_job.fut.result(timeout=120)
        short_gen = sent[0].fut.result(timeout=120)
    finally:
        batcher.close()
    assert isinstance(long_gen, Generation) and long_gen.error is None and short_gen.error is None
    events = list(batcher.events)
    slices = [k for k, e in enumerate(events) if e[0] == "prefill" and e[1] == long_job.seq]
    short_done = events.index(("done", sent[0].seq))
    assert len(slices) >= 8 and events[slices[0]][2] == 16
    assert slices[0] < short_done < slices[-1], events  # answered mid-prefill
    assert batcher.preemptions >= 1
    assert long_gen.text == be.generate([long_req])[0].text  # and the long answer is unchanged


def test_a_client_that_leaves_mid_prefill_stops_it_at_the_next_slice(tiny_vlm_dirs):
    from editlens.backends.local import TransformersBackend
    from editlens.backends.scheduler import Batcher

    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=4)
    req = ChatRequest([Message("user", ["Describe every change in detail. " * 8])], GenerationSettings(max_new_tokens=3))
    plain = be.generate_some

    def generate_some(reqs, states=None, control=None):  # type: ignore[no-untyped-def]
        inner = control.on_prefill

        def on_prefill(i, encoded, total):  # type: ignore[no-untyped-def]
            inner(i, encoded, total)
            job.cancel()  # the client goes away during the first slice

        control.on_prefill = on_prefill
        return plain(reqs, states, control)

    be.generate_some = generate_some  # type: ignore[method-assign]
    batcher = Batcher(be, window_ms=0, slice_ms=0, prefill_tokens=16)
    try:
        job = batcher.enqueue(req, prompt_tokens=be.count_prompt_tokens(req))
        gen = job.fut.result(timeout=120)
    finally:
        batcher.close()
    assert gen.error is not None and "went away" in gen.error
    assert [e for e in batcher.events if e[0] == "prefill"] == [("prefill", job.seq, 16, job.prompt_tokens)]


def test_a_long_sampled_request_is_sliced_not_prefilled_in_one_shared_step(tiny_vlm_dirs):
    """n > 1 samples share one prefill of a short prompt; a prompt over a slice is sliced
    instead, with the samples of the shared prefill (same seeds, same draws)."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.scheduler import Batcher

    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=4)
    req = ChatRequest([Message("user", ["Describe every change in detail. " * 8])],
                      GenerationSettings(max_new_tokens=3, n=2, temperature=1.0, seed=3))
    batcher = Batcher(be, window_ms=0, slice_ms=0, prefill_tokens=16)
    try:
        job = batcher.enqueue(req, prompt_tokens=be.count_prompt_tokens(req))
        gen = job.fut.result(timeout=120)
    finally:
        batcher.close()
    assert gen.error is None and len(gen.samples) == 2
    assert sum(1 for e in batcher.events if e[0] == "prefill") >= 8
    assert gen.samples == be.generate([req])[0].samples
