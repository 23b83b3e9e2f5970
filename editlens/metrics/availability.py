"""Which metrics can run here, and why not when they cannot."""

from __future__ import annotations

from typing import Mapping

from editlens.metrics.spec import MetricSpec


def metric_availability(spec: MetricSpec, models: Mapping[str, str] | None = None,
                        options: Mapping[str, object] | None = None,
                        detailed: bool = False) -> tuple[bool, str | None]:
    """``(True, None)`` when the metric's model can be loaded without a
    network, else ``(False, reason)``. Model-free metrics are always available.
    ``detailed``: a reason with where it looked and how to fix it (for a
    metric the user asked for by name)."""
    options = options or {}
    if spec.vlm == "required" and not options.get("vlm"):
        return False, "needs a vision-language model (--vlm)"
    own_check = spec.load_availability()
    if own_check is not None:  # models that are not a plain hub id or folder
        return own_check(dict(options), dict(models or {}))
    role = spec.model
    if role is None or role == "vlm":
        return True, None
    if role.startswith("lpips-"):
        from editlens.metrics.lpips import backbone_path, heads_path

        net = role.split("-", 1)[1]
        if options.get("backbone_weights"):
            return True, None
        if heads_path(net) is None:
            return False, (f"LPIPS heads file weights/v0.1/{net}.pth not found: it ships with the lpips package "
                           "(pip install --no-deps lpips==0.1.4), or pass --option lpips.heads=FILE")
        if not backbone_path(net).is_file():
            from editlens.metrics.lpips import BACKBONE_FILES

            return False, (f"torchvision {net} backbone weights not found at {backbone_path(net)}: download "
                           f"{BACKBONE_FILES[net][1]} to that path, or pass --option lpips.backbone_weights=FILE")
        return True, None
    from editlens.models.resolve import is_available, model_reference, unavailable_message

    mref = model_reference(str(options.get("model") or role), models)
    if is_available(mref):
        return True, None
    if detailed:
        return False, unavailable_message(mref, "not found locally")
    return False, f"model {mref.ref!r} ({role}) not found locally; set EDITLENS_MODEL_{role.upper()} or --model {role}=DIR"
