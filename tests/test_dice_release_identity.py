"""DICE run as the release runs it: coherence images rendered like the
release's matplotlib figures, the release's change text, verbatim prompts and
the release's confidence output, each recorded when it differs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from editlens.dice.released_format import coherence_images, release_change_text
from editlens.dice.types import Difference
from editlens.errors import InputError

CLONE = Path(__file__).parent / "data" / "dice_prompts_clone"


def _greenish(img):
    """Pixels of matplotlib's "green" (0, 128, 0) after JPEG: green well above red and blue."""
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return (g - r > 60) & (g - b > 60)


def test_release_rendering_is_a_letterboxed_640x480_jpeg_with_a_4px_box():
    grey = np.full((512, 512, 3), 128, np.uint8)
    d = Difference("EDIT", "car", (0.25, 0.25, 0.75, 0.75))
    src, edt = coherence_images(grey, grey.copy(), d, "released", rendering="release")
    assert src.shape == edt.shape == (480, 640, 3)
    # the 480x480 picture sits in columns 80..559, white bars either side (JPEG: near white)
    for img in (src, edt):
        assert (img[:, :78] >= 250).all() and (img[:, 562:] >= 250).all()
        assert abs(int(img[20, 320, 0]) - 128) <= 3
    assert not _greenish(src).any()  # EDIT goes on the edited image only ("released" convention)
    # box x 0.25..0.75 of 512 px -> 128..384 -> canvas 80 + 128 * 480/512 = 200 .. 440; 3 pt = ~4.2 px wide
    row = _greenish(edt[240])
    xs = np.nonzero(row)[0]
    left = xs[xs < 320]
    assert 197 <= left.min() and left.max() <= 203 and 3 <= len(left) <= 6
    assert edt[240, left[len(left) // 2]].tolist() == pytest.approx([0, 128, 0], abs=20)  # matplotlib "green"
    assert not row[300:340].any()  # no fill
    ys = np.nonzero(_greenish(edt[:, 320]))[0]
    assert 117 <= ys.min() <= 123 and 357 <= ys.max() <= 363  # rows: 128 * 480/512 = 120 .. 360


@pytest.mark.parametrize("command,colour,on", [("ADD", (255, 0, 0), "edited"), ("REMOVE", (0, 0, 255), "source")])
def test_release_rendering_colour_per_command(command, colour, on):
    grey = np.full((64, 64, 3), 128, np.uint8)
    src, edt = coherence_images(grey, grey.copy(), Difference(command, "x", (0.2, 0.2, 0.8, 0.8)), "released",
                                rendering="release")
    drawn = {"source": src, "edited": edt}[on]
    c = int(np.argmax(colour))
    strong = drawn[..., c].astype(int) - drawn[..., [i for i in range(3) if i != c]].max(-1) > 100
    assert strong.sum() > 100


def test_square_images_keep_their_size_non_square_are_cropped_to_512():
    from editlens.dice.release_rendering import release_square

    assert release_square(np.zeros((64, 64, 3), np.uint8)).size == (64, 64)  # square: not resized to 512
    wide = np.zeros((60, 100, 3), np.uint8)
    wide[:, 20:80] = 200  # the centre square
    sq = release_square(wide)
    assert sq.size == (512, 512) and np.asarray(sq).min() >= 190
    # a 64x64 image fills the same 480x480 picture area as a 512x512 one
    src, _ = coherence_images(np.full((64, 64, 3), 128, np.uint8), np.full((64, 64, 3), 128, np.uint8),
                              Difference("ADD", "x", (0.1, 0.1, 0.2, 0.2)), "released", rendering="release")
    assert src.shape == (480, 640, 3) and abs(int(src[240, 90, 0]) - 128) <= 3


def test_original_and_edit_of_different_sizes_follow_the_originals_size_as_the_release():
    """DICE's coherence_on_prediction_dataset.py decides the crop by the original's size and de-normalises the box
    with it, for both images: a square original leaves a non-square edit as it is and draws the box at the
    original's pixel scale; a non-square original crops and resizes both, the square edit too."""
    from editlens.dice.release_rendering import release_pair

    square, wide = np.full((64, 64, 3), 128, np.uint8), np.full((96, 128, 3), 128, np.uint8)
    a, b = release_pair(square, wide)
    assert a.size == (64, 64) and b.size == (128, 96)  # neither squared
    a, b = release_pair(np.full((60, 100, 3), 128, np.uint8), square)
    assert a.size == b.size == (512, 512)  # both squared, the square edit resized too
    _, edt = coherence_images(square, wide, Difference("ADD", "x", (0.5, 0.5, 0.9, 0.9)), "released",
                              rendering="release")
    red = (edt[..., 0].astype(int) - edt[..., 1:].max(-1)) > 100
    ys, xs = np.nonzero(red)
    # the 128x96 edit fills the 640x480 canvas (x5); the box at the original's scale: x 32..58 px -> 160..288
    assert xs.max() < 320 and ys.max() < 320 and xs.min() > 140  # not at the edit's own 0.5..0.9 (320..576)


def test_editlens_rendering_is_kept_as_an_option():
    grey = np.full((60, 100, 3), 128, np.uint8)
    src, edt = coherence_images(grey, grey.copy(), Difference("EDIT", "x", (0.3, 0.25, 0.7, 0.75)), "released",
                                rendering="editlens")
    assert src.shape == (512, 512, 3) and ((edt == (0, 255, 0)).all(-1)).any()
    with pytest.raises(ValueError, match="rendering"):
        coherence_images(grey, grey, Difference("EDIT", "x", (0.3, 0.25, 0.7, 0.75)), rendering="svg")


def test_release_change_text_keeps_the_answers_spacing():
    raw = "['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'REMOVE:dog , (0.5, 0.5, 0.9, 1.0)']"
    add = Difference("ADD", "cat", (0.1, 0.2, 0.3, 0.4), char_offset=raw.index("ADD"))
    rem = Difference("REMOVE", "dog", (0.5, 0.5, 0.9, 1.0), char_offset=raw.index("REMOVE"))
    assert release_change_text(raw, add) == "ADD:  cat"  # the release's two spaces
    assert release_change_text(raw, rem) == "REMOVE: dog "
    assert release_change_text(None, add) == "ADD: cat"


def test_confidence_options_are_named_after_what_they_return():
    from editlens.dice.released import CONFIDENCE_SOURCES, Preset, confidence_name

    assert CONFIDENCE_SOURCES == ("softmax-logits", "softmax-penalised-scores", "constant-one")
    assert confidence_name("scores") == "softmax-penalised-scores" and confidence_name("logits") == "softmax-logits"
    assert Preset.from_dict({"confidence": "scores"}).confidence == "softmax-penalised-scores"
    assert Preset().coherence_inputs == "release"
    with pytest.raises(InputError, match="confidence must be one of"):
        confidence_name("probs")
    with pytest.raises(InputError, match="coherence_inputs"):
        Preset.from_dict({"coherence_inputs": "svg"})


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    from editlens.testing.tiny_dice import build_released_layout

    return build_released_layout(tmp_path_factory.mktemp("released"))


def test_released_run_feeds_release_inputs_and_records_the_release_output(layout, tmp_path, monkeypatch):
    from PIL import Image

    from editlens.core.types import EditSample
    from editlens.dice.released import RawGeneration, ReleasedModel, build_released

    answer = "['ADD: cat, (0.25, 0.25, 0.5, 0.75)']"
    seen: list = []

    def fake_generate(self, conversation, images, gen, candidates, confidence="softmax-logits"):
        seen.append((conversation, [np.asarray(i) for i in images], confidence))
        if candidates == ("YES", "NO"):
            return RawGeneration("Reasoning: fine\nDecision: YES", [1], [0], [{}], [], "stop")
        return RawGeneration(answer, [1], [0], [{}], [], "stop")

    monkeypatch.setattr(ReleasedModel, "generate", fake_generate)
    det, coh = ("{}+{}".format(*layout[k]) for k in ("detector", "coherence"))
    rng = np.random.default_rng(0)
    for n, shape in (("a", (32, 32, 3)), ("b", (32, 32, 3)), ("w", (32, 48, 3))):
        Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(tmp_path / f"{n}.png")
    dice = build_released(None, detector=det, coherence=coh, prompts=str(CLONE), quantization="none",
                          device="cpu", confidence="constant-one")
    (res,) = dice.run([EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "add a cat").load()])
    conv, images, _ = seen[-1]
    assert [i.shape for i in images] == [(480, 640, 3)] * 2
    assert "Change: ADD:  cat\n" in conv[1]["content"][0]["text"]  # the release's spacing, verbatim prompt
    assert conv[0]["content"][0]["text"] == "\nCheck one change against the request.\n"
    assert res.differences[0].confidence == 1.0 and res.confidence_from == "constant-one"
    assert not any("non-square" in n for n in res.differences_from_release)  # square: same boxes as the release
    assert res.to_dict()["identical_to_release"] == (not res.differences_from_release)
    desc = dice.describe()
    assert desc["coherence_rendering"]["canvas"] == [640, 480]
    assert not any("confidence" in n or "coherence images" in n for n in desc["differences_from_release"])
    # a non-square pair records the box-mapping difference on that sample
    (res2,) = dice.run([EditSample("e", str(tmp_path / "w.png"), str(tmp_path / "w.png"), "add a cat").load()])
    assert any("non-square image" in n for n in res2.to_dict()["differences_from_release"])
    assert res2.to_dict()["identical_to_release"] is False
    # editlens' own inputs and confidence stay available, and are named as differences
    ours = build_released(None, detector=det, coherence=coh, quantization="none", device="cpu",
                          coherence_inputs="editlens")
    ours.run([EditSample("e", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "add a cat").load()])
    assert seen[-1][1][0].shape == (512, 512, 3) and ": ADD: cat\n" in seen[-1][0][1]["content"][0]["text"]
    notes = " ".join(ours.describe()["differences_from_release"])
    assert "coherence images drawn by editlens" in notes and "constant-one" in notes


def test_items_the_release_drops_are_kept_and_flagged():
    """DICE's parser keeps an item only when its coordinates are floats in [0, 1]; editlens keeps integer and
    slightly-out-of-range ones (clamped) and flags each as dropped by the release."""
    from editlens.dice.released_format import RELEASE_DROPS_FLAG, parse_released_answer

    a = parse_released_answer("['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'EDIT: dog, (0, 0.2, 1, 0.9)', "
                              "'REMOVE: cup, (0.5, 0.5, 0.9, 1.03)']")
    flagged = [RELEASE_DROPS_FLAG in d.flags for d in a.differences]
    assert flagged == [False, True, True]
    assert a.differences[2].box[3] == 1.0
