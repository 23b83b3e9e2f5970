import io

import numpy as np
import pytest
from PIL import Image

from editlens.core.images import ImageLoadOptions, load_image
from editlens.core.types import EditSample, Score
from editlens.errors import InputError


def _save(tmp_path, name, img, **kw):
    p = tmp_path / name
    img.save(p, **kw)
    return p


def test_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match=r"nope\.png: file not found"):
        load_image(tmp_path / "nope.png")


def test_directory_is_refused(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load_image(tmp_path)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.png"
    p.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.png: empty file"):
        load_image(p)


def test_not_an_image(tmp_path):
    p = tmp_path / "notes.png"
    p.write_text("hello, I am text")
    with pytest.raises(InputError, match=r"notes\.png: not an image"):
        load_image(p)


def test_truncated_file(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    p = tmp_path / "cut.png"
    p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(InputError, match=r"cut\.png: (truncated|corrupt)"):
        load_image(p)


def test_decompression_bomb_guard(tmp_path):
    p = _save(tmp_path, "big.png", Image.new("RGB", (100, 100)))
    with pytest.raises(InputError, match=r"big\.png: image is 100x100 = 10,000 pixels, above the limit of 9,999"):
        load_image(p, ImageLoadOptions(max_pixels=9_999))


def test_rgba_composited_on_white(tmp_path):
    img = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    img.putpixel((0, 0), (255, 0, 0, 255))
    arr, notes = load_image(_save(tmp_path, "a.png", img))
    assert arr[0, 0].tolist() == [255, 0, 0]
    assert arr[1, 1].tolist() == [255, 255, 255]
    assert notes == ["alpha composited on (255, 255, 255)"]


def test_half_transparent_blend():
    rgba = np.zeros((1, 1, 4), dtype=np.uint8)
    rgba[0, 0] = [0, 0, 0, 128]
    arr, _ = load_image(rgba)
    assert arr[0, 0].tolist() == [127, 127, 127]  # 255 * (1 - 128/255) = 127.0


@pytest.mark.parametrize("mode", ["L", "P", "CMYK", "I;16"])
def test_modes_converted_to_rgb(tmp_path, mode):
    base = Image.new("RGB", (8, 8), (10, 200, 30))
    img = base.convert("L").convert("I;16") if mode == "I;16" else base.convert(mode)
    ext = "tiff" if mode in ("CMYK", "I;16") else "png"
    arr, notes = load_image(_save(tmp_path, f"m.{ext}", img))
    assert arr.shape == (8, 8, 3) and arr.dtype == np.uint8
    assert any(mode in n for n in notes)


def test_exif_orientation_applied(tmp_path):
    img = Image.new("RGB", (20, 10), (0, 0, 0))
    img.paste((255, 255, 255), (0, 0, 10, 10))  # left half white
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    p = tmp_path / "o.jpg"
    img.save(p, exif=exif, quality=95)
    arr, notes = load_image(p)
    assert arr.shape == (20, 10, 3)  # portrait after rotation
    assert arr[2, 5].mean() > 200 and arr[17, 5].mean() < 50  # white half on top
    assert notes == ["EXIF orientation 6 applied"]


def test_float_array_range_checked():
    with pytest.raises(InputError, match=r"float arrays must hold values in \[0, 1\]"):
        load_image(np.full((4, 4, 3), 2.0))
    arr, _ = load_image(np.full((4, 4, 3), 0.5))
    assert arr[0, 0, 0] == 128


def test_bad_array_shape():
    with pytest.raises(InputError, match="channels last"):
        load_image(np.zeros((3, 4, 4, 2)))


def test_size_mismatch_resized_and_recorded():
    src = np.zeros((10, 20, 3), np.uint8)
    edt = np.zeros((20, 40, 3), np.uint8)
    loaded = EditSample("s", src, edt, "x").load()
    assert loaded.edited.shape == (10, 20, 3)
    assert loaded.resized
    assert "edited: resized from 40x20 to source size 20x10 (bicubic)" in loaded.notes


def test_size_mismatch_error_policy(tmp_path):
    p = _save(tmp_path, "e.png", Image.new("RGB", (40, 20)))
    with pytest.raises(InputError, match=r"e\.png: edited image is 40x20 but the source is 20x10"):
        EditSample("s", np.zeros((10, 20, 3), np.uint8), p, "x").load(ImageLoadOptions(size_policy="error"))


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_instruction(text):
    with pytest.raises(InputError, match="sample 's': empty instruction"):
        EditSample("s", np.zeros((2, 2, 3), np.uint8), np.zeros((2, 2, 3), np.uint8), text)


def test_score_invariants():
    with pytest.raises(ValueError):
        Score("m", None, "scored")
    with pytest.raises(ValueError):
        Score("m", 0.3, "unscored")
    assert Score.skipped("m", "why").to_dict() == {"metric": "m", "value": None, "status": "skipped", "reason": "why"}
