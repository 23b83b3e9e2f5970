"""The change map never calls a real edit "unchanged": large
object motion, a region spread over half the frame, camera motion, strong and
uneven relighting, their combinations, JPEG and tiny edits, built from the
bundled example photos and synthetic images (always run) and from the shared
AURORA photos (integration). What the map explains away beyond the tolerated
drift it reports as a global change; what it tolerates (the same image, a
JPEG copy, a mildly drifted copy) stays "no change"."""

import io
import json

import cv2
import numpy as np
import pytest
from helpers import EXAMPLES, shared_path
from PIL import Image

from editlens import EditSample, create_metric
from editlens.dice.detectors import ChangeMapDetector
from editlens.metrics.changemap import ChangeMapParams, change_map
from editlens.testing.scene_changes import KINDS, inpaint_region, make_case

PHOTOS = ("cat_seat", "hydrant", "pencil_case", "dragonfruit")


def _photo(name):
    return np.asarray(Image.open(EXAMPLES / "images" / f"{name}_source.png").convert("RGB"))


def _jpeg(a, q=75):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=q)
    return np.asarray(Image.open(buf).convert("RGB"))


def _texture(h=256, w=256, seed=0, cell=8):
    """A smooth, photo-like background (blurred noise)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // cell, w // cell, 3), dtype=np.uint8)
    return np.array(Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC))


def _iou(a, b):
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _found(cm, box, iou=0.5):
    return any(_iou(r.box, box) >= iou for r in cm.regions if r.kind == "local")


def _mild_drift(a, seed=0):
    """What a diffusion editor does to what it keeps: brightness +6 %, colour
    -8 %, white balance, slight blur, a 1 px shift, noise, JPEG."""
    from PIL import ImageEnhance, ImageFilter

    rng = np.random.default_rng(seed)
    im = ImageEnhance.Brightness(Image.fromarray(a)).enhance(1.06)
    im = ImageEnhance.Color(im).enhance(0.92).filter(ImageFilter.GaussianBlur(0.8))
    x = np.asarray(im).astype(np.float32) * np.array([1.03, 0.98, 1.0]) + np.array([4, -3, 2])
    x = np.pad(x, ((2, 2), (2, 2), (0, 0)), mode="edge")[1:-3, 2:-2]
    x = x + rng.normal(0, 3, x.shape)
    return _jpeg(np.clip(x, 0, 255).astype(np.uint8), 85)


# --- every kind of change, on the bundled photos ------------------------------

def _cases(seeds=(0, 1)):
    for seed in seeds:
        for ni, name in enumerate(PHOTOS):
            photo = _photo(name)
            for k, kind in enumerate(KINDS):
                rng = np.random.default_rng(1000 * seed + 10 * ni + k)
                yield name, make_case(photo, kind, rng, size=320, jpeg_quality=85 if (k + seed) % 2 else None)


def test_no_kind_of_change_is_called_unchanged():
    """Every case, whatever its kind: regions (a whole-image one at least),
    a value above 0, and the global causes it has (camera moved, relit)
    named. Local changes are found where the kind makes them findable."""
    found: dict[str, list[bool]] = {}
    for name, case in _cases():
        cm = change_map(case.source, case.edited)
        assert cm.regions and cm.changed_fraction > 0, (name, case.kind, case.info)
        causes = cm.global_change.causes if cm.global_change else []
        if case.kind == "camera+relight+spread":
            # half the frame changed, the camera moved, the light changed: a
            # global change, though which causes it names may vary ("changed
            # throughout" for a camera motion hidden by the cloth)
            assert causes, (name, case.kind, case.info)
        else:
            assert set(case.causes) <= set(causes), (name, case.kind, case.info, causes)
        if not case.causes:  # a purely local edit is not reported as a camera or light change
            assert "camera moved" not in causes and "relit" not in causes, (name, case.kind, causes)
        for box in case.boxes:
            found.setdefault(case.kind, []).append(_found(cm, box))
    # Where the change stands out (an object appearing, a spread cloth, a tiny
    # object): always found, camera motion and all.
    for kind in ("spread", "tiny", "camera+object"):
        assert all(found[kind]), (kind, found[kind])
    # Moves, and objects under a strong light change: most.
    for kind in ("move_far", "camera+move", "relight+object", "uneven_light+object"):
        assert np.mean(found[kind]) >= 0.6, (kind, found[kind])


def test_global_change_is_a_whole_image_region_with_its_reason():
    case = make_case(_photo("hydrant"), "relight", np.random.default_rng(3), size=320)
    cm = change_map(case.source, case.edited)
    first = cm.regions[0]
    assert first.kind == "global" and first.box == (0, 0, 320, 320) and first.area_fraction == 1.0
    assert first.strength > 1 and 0 < first.confidence < 1
    assert cm.changed_fraction == 1.0
    g = cm.global_change
    assert g.causes == ["relit"] and g.reason.startswith("change is global: relit")
    assert ("darker" in g.reason) == (g.brightness < 0)


# --- constructed images: each mechanism and its report ------------------------

def test_camera_shift_is_undone_and_reported():
    """A 12 px camera shift (real content entering at the border, no padding)
    with an object added: "camera moved", and the object's box, in the
    source's coordinates, found after the shift is undone."""
    big = _texture(300, 300, seed=1)
    src = np.ascontiguousarray(big[20:276, 20:276])
    moved = big.copy()
    moved[100:140, 120:170] = (230, 30, 40)  # in the scene: source pixels (100, 80)-(150, 120)
    edt = np.ascontiguousarray(moved[20 + 12 : 276 + 12, 20 + 5 : 276 + 5])  # the camera moved right/down
    cm = change_map(src, _jpeg(edt, 90))
    g = cm.global_change
    assert g is not None and g.causes == ["camera moved"]
    assert abs(g.camera * 256 - np.hypot(12, 5)) < 1.5
    assert _found(cm, (100, 80, 150, 120), 0.7)


def test_strong_relight_alone_is_relit_not_unchanged():
    src = _texture(seed=2)
    for gain in (0.6, 1.5):
        edt = np.clip(src.astype(np.float32) * gain * np.array([1.05, 1.0, 0.93]), 0, 255).astype(np.uint8)
        cm = change_map(src, edt)
        assert cm.global_change is not None and cm.global_change.causes == ["relit"], gain
        assert (cm.global_change.brightness > 0) == (gain > 1)
        assert cm.regions[0].kind == "global" and cm.changed_fraction == 1.0
        if gain < 1:  # the light change is undone: nothing local left (brightening clips highlights)
            assert [r.kind for r in cm.regions] == ["global"]


def test_relight_with_an_object_finds_the_object():
    src = _texture(seed=3)
    edt = src.copy()
    edt[60:110, 150:210] = (20, 200, 60)
    edt = np.clip(edt.astype(np.float32) * 0.55, 0, 255).astype(np.uint8)
    cm = change_map(src, edt)
    assert cm.global_change.causes == ["relit"]
    assert _found(cm, (150, 60, 210, 110), 0.7)


def test_uneven_light_is_relit():
    """Half the frame in shadow, smoothly (a gain from 0.5 to 1.2 across it)."""
    src = _texture(seed=4)
    ramp = np.linspace(0.5, 1.2, 256, dtype=np.float32)[None, :, None]
    cm = change_map(src, np.clip(src * ramp, 0, 255).astype(np.uint8))
    assert cm.global_change is not None and "relit" in cm.global_change.causes
    assert cm.global_change.uneven > 0.1


def test_unrelated_images_changed_throughout():
    cm = change_map(_texture(seed=5), _texture(seed=6))
    assert cm.global_change is not None and "changed throughout" in cm.global_change.causes
    assert cm.changed_fraction == 1.0


def test_region_spread_over_half_the_frame():
    src = _photo("cat_seat")  # 320 x 320
    edt = src.copy()
    edt[160:] = cv2.resize(src[20:70, 200:260], (320, 160), interpolation=cv2.INTER_CUBIC)
    cm = change_map(src, _jpeg(edt, 85))
    big = max((r for r in cm.regions if r.kind == "local"), key=lambda r: r.area_fraction)
    assert _iou(big.box, (0, 160, 320, 320)) > 0.8


def test_inpainted_texture_is_a_change():
    """Removing something from a textured area: the fill's colours lie within
    the texture's range, its texture is gone (JPEG-compressed afterwards)."""
    rng = np.random.default_rng(8)
    src = np.clip(_texture(512, 512, seed=8).astype(np.int16) + rng.integers(-40, 41, (512, 512, 1)), 0, 255)
    src = cv2.GaussianBlur(src.astype(np.uint8), (3, 3), 0.6)
    edt = _jpeg(inpaint_region(src, (200, 220, 260, 270)), 90)
    cm = change_map(src, edt)
    assert cm.global_change is None
    assert _found(cm, (200, 220, 260, 270), 0.5)


def test_jpeg_tiny_and_dark_edits_are_found():
    src = _texture(512, 512, seed=9)
    src[300:420, 40:220] = (22, 20, 18)  # a black table
    edt = src.copy()
    edt[100:114, 300:314] = (250, 250, 30)  # 14 x 14 px at 512
    yy, xx = np.mgrid[0:512, 0:512]
    ell = ((xx - 130) / 40.0) ** 2 + ((yy - 360) / 30.0) ** 2 <= 1
    edt[ell] = (10, 10, 40)  # a dark blue patch on the black table
    cm = change_map(src, _jpeg(edt, 85))
    assert cm.global_change is None
    assert _found(cm, (300, 100, 314, 114), 0.6) and _found(cm, (90, 330, 171, 391), 0.6)


def test_coloured_watermark_at_the_border_survives_jpeg():
    """JPEG keeps colour at half resolution: a strip of small saturated
    squares along the border (an editor's watermark) changes under JPEG q75,
    which is no edit."""
    src = _texture(512, 512, seed=10)
    for i, c in enumerate([(255, 255, 80), (80, 255, 255), (80, 220, 80), (255, 110, 60), (60, 60, 255)]):
        src[504:512, 472 + 8 * i : 480 + 8 * i] = c
    for q in (75, 90):
        assert change_map(src, _jpeg(src, q)).regions == []


@pytest.mark.parametrize("name", PHOTOS)
def test_tolerated_changes_stay_unchanged(name):
    """The guarantee in docs/metrics.md, beyond ../shared: the photo against
    itself, a JPEG copy (q75, q90) and a mildly drifted copy is no change, and
    no global change either."""
    a = _photo(name)
    for b in (a, _jpeg(a, 75), _jpeg(a, 90), _mild_drift(a)):
        cm = change_map(a, b)
        assert cm.regions == [] and cm.global_change is None and cm.changed_fraction == 0.0


def test_drift_with_a_three_pixel_shift_is_not_a_camera_move():
    big = _texture(270, 270, seed=11)
    src = np.ascontiguousarray(big[7:263, 7:263])
    edt = np.ascontiguousarray(big[7 + 3 : 263 + 3, 7 - 2 : 263 - 2])
    cm = change_map(src, _jpeg(edt, 85))
    assert cm.global_change is None and cm.regions == []


# --- what users see: the metric and DICE's model-free detector ----------------

def test_metric_reports_a_global_change_with_its_reason(tmp_path):
    case = make_case(_photo("cat_seat"), "camera+object", np.random.default_rng(4), size=320, jpeg_quality=85)
    Image.fromarray(case.source).save(tmp_path / "s.png")
    Image.fromarray(case.edited).save(tmp_path / "e.png")
    sc = create_metric("change_map")([EditSample("x", tmp_path / "s.png", tmp_path / "e.png", "move").load()])[0]
    assert sc.status == "scored" and sc.value == 1.0
    g = sc.details["global"]
    assert "camera moved" in g["causes"] and g["reason"].startswith("change is global: camera moved")
    assert 0 < sc.details["local_fraction"] < 0.5
    assert sc.details["regions"][0]["kind"] == "global" and sc.details["regions"][0]["box_norm"] == [0, 0, 1, 1]
    assert any(r["kind"] == "local" for r in sc.details["regions"][1:])
    json.dumps(sc.to_dict())  # plain JSON all the way down


def test_metric_without_a_global_change_has_no_global_key():
    src, edt = _photo("hydrant"), np.asarray(Image.open(EXAMPLES / "images" / "hydrant_edited.png").convert("RGB"))
    sc = create_metric("change_map")([EditSample("x", src, edt, "i").load()])[0]
    assert "global" not in sc.details and sc.value > 0
    assert sc.value == pytest.approx(sc.details["local_fraction"], abs=1e-6)
    assert all(r["kind"] == "local" and "cause" not in r for r in sc.details["regions"])


def test_dice_detector_flags_the_whole_image_difference():
    src = _texture(seed=12)
    edt = np.clip(src.astype(np.float32) * 0.5, 0, 255).astype(np.uint8)
    (res,) = ChangeMapDetector().detect([EditSample("x", src, edt, "make it dusk").load()])
    (d,) = res.differences
    assert d.box == (0.0, 0.0, 1.0, 1.0) and d.flags == ["global: relit"] and d.command == "CHANGE"


def test_escalation_can_be_turned_off():
    """Without the richer alignment a camera move is not undone, but the
    pair still is not called unchanged."""
    case = make_case(_photo("dragonfruit"), "camera", np.random.default_rng(0), size=320)
    cm = change_map(case.source, case.edited, ChangeMapParams(escalate=False))
    assert cm.regions


# --- the same kinds, built from the shared AURORA photos ----------------------

def _aurora_photos(every=4):
    root = shared_path("data", "aurora")
    seen, out = set(), []
    for r in (json.loads(line) for line in open(root / "edits.jsonl")):
        if r["input"] in seen or "output" in r["input"].rsplit("/", 1)[-1]:
            continue
        seen.add(r["input"])
        out.append((r["task"], root / r["input"]))
    return out[::every]


def _kinds_on_photo(args):
    """Every kind of change made on one photo (half JPEG'd), as the change map sees it."""
    j, path = args
    photo = np.asarray(Image.open(path).convert("RGB"))
    rng = np.random.default_rng(2000 + j)
    out = []
    for kind in KINDS:
        q = int(rng.integers(70, 95)) if rng.random() < 0.5 else None
        case = make_case(photo, kind, rng, jpeg_quality=q)
        cm = change_map(case.source, case.edited)
        out.append((kind, path.name, case.info, bool(cm.regions) and cm.changed_fraction > 0,
                    cm.global_change.causes if cm.global_change else [], list(case.causes),
                    [_found(cm, box) for box in case.boxes]))
    return out


@pytest.mark.integration
def test_aurora_kinds_never_unchanged():
    """About 30 AURORA photos (MagicBrush, Kubric, WhatsUp), every kind, half
    of them JPEG-compressed: never "no change"; every camera motion and light
    change named; local changes found at the rates the kinds allow."""
    from helpers import pmap

    found: dict[str, list[bool]] = {}
    named: dict[str, list[bool]] = {}
    for per_kind in pmap(_kinds_on_photo, list(enumerate(p for _, p in _aurora_photos()))):
        for kind, name, info, changed, causes, wanted, boxes_found in per_kind:
            assert changed, (name, kind, info)
            if kind == "camera+relight+spread":  # a global change, its causes as they show (see above)
                assert causes, (name, kind, info)
                continue
            for c in wanted:
                named.setdefault(kind, []).append(c in causes)
            found.setdefault(kind, []).extend(boxes_found)
    # Measured on 31 photos: every camera motion and light change named, but
    # 2 of 31 uneven lights with an object and 1 of 62 causes of camera +
    # light + move; objects found: 100 % (spread, tiny, camera + object),
    # 81-84 % (under a light change), 63-69 % (moves), 50 % (all at once).
    for kind, ok in named.items():
        assert np.mean(ok) >= (0.95 if kind in ("camera", "relight", "uneven_light", "camera+object") else 0.9), (kind, ok)
    for kind in ("spread", "tiny", "camera+object"):
        assert np.mean(found[kind]) >= 0.9, (kind, found[kind])
    for kind in ("relight+object", "uneven_light+object"):
        assert np.mean(found[kind]) >= 0.7, (kind, found[kind])
    for kind in ("move_far", "camera+move"):
        assert np.mean(found[kind]) >= 0.55, (kind, found[kind])
    assert np.mean(found["camera+relight+move"]) >= 0.4


def _frame_pair_kinds(args):
    """(photo, kind) of each issue-20 kind of change on one photo that the change map scored 0 or left without regions."""
    j, path = args
    photo = np.asarray(Image.open(path).convert("RGB"))
    rng = np.random.default_rng(3000 + j)
    misses = []
    for kind in ("camera+relight+spread", "camera+relight+move", "spread", "camera+move"):
        case = make_case(photo, kind, rng, jpeg_quality=int(rng.integers(70, 95)))
        sc = create_metric("change_map")([EditSample("x", case.source, case.edited, "i").load()])[0]
        if not (sc.status == "scored" and sc.value > 0 and sc.details["regions"]):
            misses.append((path.name, kind))
    return misses


@pytest.mark.integration
def test_aurora_frame_pairs_like_something_something():
    """The reported failures in kind: a cloth spread over half the frame
    while the camera and the light move, hands (objects) moved, on every
    AURORA photo not used above: never value 0 with no regions."""
    from helpers import pmap

    photos = _aurora_photos(every=1)[1::4]
    bad = [miss for misses in pmap(_frame_pair_kinds, list(enumerate(p for _, p in photos))) for miss in misses]
    assert bad == []


def test_report_labels_the_whole_image_change():
    from editlens.reporting.collect import boxes_of

    scores = {"change_map": {"details": {"regions": [
        {"box_norm": [0, 0, 1, 1], "area_fraction": 1.0, "kind": "global", "cause": "camera moved"},
        {"box_norm": [0.1, 0.1, 0.2, 0.2], "area_fraction": 0.01, "kind": "local"}]}}}
    assert [b["label"] for b in boxes_of(scores)] == ["whole image: camera moved", "1.00% of the image"]
