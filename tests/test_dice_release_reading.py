"""DICE's detector answers read as the release reads them
(``--option dice.dice_answer_reading=release``) and the released loader's
processor taken from the stock Idefics3 processor (``dice_processor``), each
recorded per result; editlens' own reading and processor stay the default."""

from __future__ import annotations

import numpy as np
import pytest

from editlens.dice.released_format import parse_released_answer, read_as_release
from editlens.errors import InputError


def _items(ans):
    return [(d.command, d.object, d.box) for d in ans.differences]


def test_release_drops_integer_and_out_of_range_coordinates_without_clamping():
    text = ("['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'EDIT: dog, (0, 0.2, 1, 0.9)', "
            "'REMOVE: cup, (0.5, 0.5, 0.9, 1.03)']")
    rel = read_as_release(text)
    assert _items(rel) == [("ADD", "cat", (0.1, 0.2, 0.3, 0.4))]
    assert len(rel.rejected) == 2 and "0" in rel.rejected[0] and "1.03" in rel.rejected[1]
    assert [d.command for d in parse_released_answer(text).differences] == ["ADD", "EDIT", "REMOVE"]


def test_a_three_value_box_ends_the_release_reading():
    text = ("['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'EDIT: hat, (0.1, 0.2, 0.3)', "
            "'REMOVE: cup, (0.5, 0.5, 0.9, 0.95)']")
    rel = read_as_release(text)
    assert _items(rel) == [("ADD", "cat", (0.1, 0.2, 0.3, 0.4))]
    assert "a box of 3 values" in rel.rejected[0] and "not read" in rel.rejected[1]
    assert [d.command for d in parse_released_answer(text).differences] == ["ADD", "REMOVE"]


def test_nochange_leaves_the_answer_unscored_where_the_release_raises():
    for text in ("['nochange']", "['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'nochange']"):
        rel = read_as_release(text)
        assert rel.differences is None and "nochange" in rel.problem and "raises" in rel.problem
    assert parse_released_answer("['nochange']").no_change  # editlens' reading: no change


def test_release_reading_edge_cases():
    # an explicit empty list is no change; no list at all, or every item dropped, is unscored (never a verdict)
    empty = read_as_release("[]")
    assert empty.differences == [] and empty.no_change
    assert read_as_release("I see two cats").differences is None
    dropped = read_as_release("['ADD: cat, (0, 0, 1, 1)']")
    assert dropped.differences is None and "drops every item" in dropped.problem
    # the first line only
    two = read_as_release("['ADD: cat, (0.1, 0.2, 0.3, 0.4)']\n['REMOVE: cup, (0.5, 0.5, 0.9, 0.95)']")
    assert [d.command for d in two.differences] == ["ADD"] and "first line" in two.rejected[0]
    # a missing closing bracket is added, as the release does; swapped corners are kept, flagged, not reordered
    cut = read_as_release("['ADD: cat, (0.3, 0.2, 0.1, 0.4)'")
    assert _items(cut) == [("ADD", "cat", (0.3, 0.2, 0.1, 0.4))] and "inverted" in cut.differences[0].flags[0]
    assert cut.differences[0].char_offset == 2
    # a command the release does not write that way: unscored rather than guessed
    assert read_as_release("['add: cat, (0.1, 0.2, 0.3, 0.4)']").differences is None


def test_an_apostrophe_goes_to_json_repair_and_is_unscored_without_it():
    try:
        import json_repair  # noqa: F401
    except ImportError:
        rel = read_as_release("['ADD: man's hat, (0.1, 0.2, 0.3, 0.4)']")
        assert rel.differences is None and "json_repair" in rel.problem
    else:
        pytest.skip("json_repair installed: the release's repair runs")


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    from editlens.testing.tiny_dice import build_released_layout

    return build_released_layout(tmp_path_factory.mktemp("released"))


def _images(tmp_path):
    from PIL import Image

    from editlens.core.types import EditSample

    rng = np.random.default_rng(0)
    for n in ("a", "b"):
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(tmp_path / f"{n}.png")
    return EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "add a cat").load()


def test_released_run_reads_as_the_release_when_asked_and_records_it(layout, tmp_path, monkeypatch):
    from editlens.dice.released import RawGeneration, ReleasedModel, build_released, released_from_options

    answers = {"det": "['nochange']"}

    def fake_generate(self, conversation, images, gen, candidates, confidence="softmax-logits"):
        if candidates == ("YES", "NO"):
            return RawGeneration("Reasoning: fine\nDecision: YES", [1], [0], [{}], [], "stop")
        return RawGeneration(answers["det"], [1], [0], [{}], [], "stop")

    monkeypatch.setattr(ReleasedModel, "generate", fake_generate)
    det = "{}+{}".format(*layout["detector"])
    sample = _images(tmp_path)
    ours = build_released(None, detector=det, quantization="none", device="cpu")
    (r,) = ours.run([sample])
    assert r.no_change and r.to_dict()["answer_reading"] == "editlens"
    assert any("dice_answer_reading=release" in n for n in r.differences_from_release)

    rel = released_from_options({"dice_detector": det, "dice_quantization": "none", "device": "cpu",
                                 "dice_answer_reading": "release"})
    (r,) = rel.run([sample])
    d = r.to_dict()
    assert d["unparsable"] and d["raw"] == "['nochange']" and "raises" in d["problem"] and not r.no_change
    assert d["answer_reading"] == "release"
    assert not any("answer" in n and "parser" in n for n in d.get("differences_from_release", []))
    answers["det"] = "['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'EDIT: dog, (0, 0.2, 1, 0.9)']"
    (r,) = rel.run([sample])
    assert [x.command for x in r.differences] == ["ADD"] and "dropped" in r.problem
    with pytest.raises(InputError, match="dice_answer_reading"):
        build_released(None, detector=det, quantization="none", device="cpu", answer_reading="lenient")


def test_processor_from_the_adapter_by_default_or_the_stock_one_as_released(layout, tmp_path, monkeypatch):
    """The adapter folder holds a processor that differs from the base's (64 px image tiles instead of 32):
    editlens' default reads it; ``dice_processor=release`` reads the stock Idefics3 processor the release
    loads for both models (here the tiny stock folder), ``base`` the base folder; each recorded per result."""
    import shutil

    from transformers import AutoProcessor

    import editlens.dice.released as released
    from editlens.dice.released import RawGeneration, ReleasedModel, build_released, released_from_options

    base, adapter = layout["detector"]
    stock = layout["coherence"][0]  # the layout's "Idefics3-8B-Llama3": the stock processor
    own = tmp_path / "adapter"
    shutil.copytree(adapter, own)
    proc = AutoProcessor.from_pretrained(str(base))
    proc.image_processor.max_image_size = {"longest_edge": 64}
    proc.save_pretrained(str(own))
    monkeypatch.setattr(released, "STOCK_PROCESSOR", str(stock))
    monkeypatch.setattr(ReleasedModel, "generate", lambda self, *a, **k: RawGeneration(
        "['ADD: cat, (0.1, 0.2, 0.3, 0.4)']", [1], [0], [{}], [], "stop"))
    det = f"{base}+{own}"

    ours = build_released(None, detector=det, quantization="none", device="cpu")
    assert ours.detector.processor.image_processor.max_image_size == {"longest_edge": 64}
    (r,) = ours.run([_images(tmp_path)])
    assert r.to_dict()["processor_source"] == {"detector": f"adapter: {own}"}
    assert any("not the stock" in n and "--dice-processor release" in n for n in r.differences_from_release)

    rel = released_from_options({"dice_detector": det, "dice_quantization": "none", "device": "cpu",
                                 "dice_processor": "release"})
    assert rel.detector.processor.image_processor.max_image_size == {"longest_edge": 32}
    assert rel.detector.processor.image_processor.size["longest_edge"] == 1456  # the preset's, as released
    (r,) = rel.run([_images(tmp_path)])
    assert r.to_dict()["processor_source"] == {"detector": f"release: {stock}"}
    assert not any("not the stock" in n for n in r.differences_from_release)
    from_base = build_released(None, detector=det, quantization="none", device="cpu", processor="base")
    assert from_base.detector.processor_source == f"base: {base}"
    from editlens.errors import ModelUnavailableError

    monkeypatch.setattr(released, "STOCK_PROCESSOR", str(tmp_path / "missing"))
    with pytest.raises(ModelUnavailableError, match="no such directory"):
        build_released(None, detector=det, quantization="none", device="cpu", processor="release")
