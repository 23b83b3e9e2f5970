from importlib.metadata import EntryPoint

import numpy as np
import pytest

import editlens.core.registry as core_registry
import editlens.metrics.registry as reg
from editlens import EditSample, create_metric, list_metrics
from editlens.errors import UnknownMetricError
from editlens.metrics.base import Metric
from editlens.metrics.registry import register_metric
from editlens.metrics.spec import MetricSpec


def test_metadata_of_builtins():
    specs = {s.name: s for s in list_metrics()}
    assert {"l1", "l2", "psnr", "ssim", "lpips", "clip_i", "clip_t", "clip_d", "clipscore", "dino_i",
            "change_map", "clip_i_ref", "dino_i_ref"} <= set(specs)
    assert specs["psnr"].higher_is_better and not specs["l1"].higher_is_better
    assert specs["clip_t"].needs == ("edited", "target_caption") and specs["clip_t"].model == "clip"
    assert specs["clip_d"].needs == ("source", "edited", "source_caption", "target_caption")
    assert specs["clipscore"].value_range == (0.0, 2.5)
    assert specs["l1_ref"].needs == ("edited", "reference") and specs["change_map"].model is None


def test_unknown_metric_suggests():
    with pytest.raises(UnknownMetricError, match="Did you mean ssim"):
        create_metric("sssim")


def test_options_override_defaults():
    assert create_metric("l1_ref").compare == "reference"
    assert create_metric("l1", compare="reference").compare == "reference"
    with pytest.raises(ValueError, match="region must be one of"):
        create_metric("l1", region="middle")


class Brightness(Metric):
    """Mean brightness change, a third-party metric."""

    def compute(self, batch):
        return [float(s.edited.mean() - s.source.mean()) / 255 for s in batch]


BRIGHTNESS = MetricSpec("brightness_change", Brightness, ("source", "edited"), False, (-1.0, 1.0),
                        description="mean brightness change")


def test_register_in_code():
    register_metric(MetricSpec("brightness_code", Brightness, ("source", "edited"), False, (-1.0, 1.0)))
    a = np.zeros((4, 4, 3), np.uint8)
    b = np.full((4, 4, 3), 255, np.uint8)
    assert create_metric("brightness_code")([EditSample("x", a, b, "brighten").load()])[0].value == 1.0
    with pytest.raises(ValueError, match="already registered"):
        register_metric(MetricSpec("brightness_code", Brightness, ("source",), False, (0, 1)))


def test_entry_point_plugin(monkeypatch):
    ep = EntryPoint(name="brightness_change", value="test_registry:BRIGHTNESS", group="editlens.metrics")
    monkeypatch.setattr(core_registry, "entry_points", lambda group: [ep] if group == "editlens.metrics" else [])
    monkeypatch.setattr(reg, "METRICS", reg.METRICS.fresh())
    assert "brightness_change" in [s.name for s in list_metrics()]
    a = np.zeros((4, 4, 3), np.uint8)
    assert create_metric("brightness_change")([EditSample("x", a, a, "n").load()])[0].value == 0.0
