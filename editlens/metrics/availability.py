"""Which metrics can run here, and why not when they cannot."""

from __future__ import annotations

from typing import Mapping

from editlens.metrics.registry import MetricSpec


def metric_availability(spec: MetricSpec, models: Mapping[str, str] | None = None,
                        options: Mapping[str, object] | None = None) -> tuple[bool, str | None]:
    """``(True, None)`` when the metric's model can be loaded without a
    network, else ``(False, reason)``. Model-free metrics are always available."""
    options = options or {}
    if spec.vlm == "required" and not options.get("vlm"):
        return False, "needs a vision-language model (--vlm)"
    role = spec.model
    if role is None or role == "vlm":
        return True, None
    if role.startswith("lpips-"):
        from editlens.metrics.lpips import backbone_path, heads_path

        net = role.split("-", 1)[1]
        if options.get("backbone_weights"):
            return True, None
        if heads_path(net) is None:
            return False, "LPIPS heads not installed (pip install --no-deps lpips==0.1.4)"
        if not backbone_path(net).is_file():
            return False, f"torchvision {net} weights not at {backbone_path(net)}"
        return True, None
    if role == "twoframe":  # two-frame video model: a model directory or a .pth checkpoint file
        from editlens.twoframe.evaluator import availability, resolve

        return availability(resolve(options.get("model"), dict(models or {})), dict(options))  # type: ignore[arg-type]
    from editlens.models.resolve import is_available, model_reference

    mref = model_reference(str(options.get("model") or role), models)
    if is_available(mref):
        return True, None
    return False, f"model {mref.ref!r} ({role}) not found locally; set EDITLENS_MODEL_{role.upper()} or --model {role}=DIR"
