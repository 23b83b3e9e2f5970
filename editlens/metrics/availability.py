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
    if spec.vlm == "required" and not (options.get("vlm") or options.get("engine")):
        return False, ("needs a vision-language model: pass --vlm DIR (a local VLM folder), --vlm HUB_ID (in your "
                       "Hugging Face cache) or --vlm URL --vlm-model NAME (an OpenAI-compatible server); "
                       "`editlens make-tiny-vlm DIR` writes a tiny random one to try the pipeline")
    own_check = spec.load_availability()
    if own_check is not None:  # models that are not a plain hub id or folder
        return own_check(dict(options), dict(models or {}))
    role = spec.model
    if role is None or role == "vlm":
        return True, None
    from editlens.models.resolve import is_available, model_reference, unavailable_message

    mref = model_reference(str(options.get("model") or role), models)
    if is_available(mref):
        return True, None
    if detailed:
        return False, unavailable_message(mref, "not found locally")
    fix = f"--model {role}=DIR or EDITLENS_MODEL_{role.upper()}=DIR"
    if mref.local_dir is None and "/" in mref.ref and not mref.ref.startswith((".", "/", "~")):
        fix = f"`hf download {mref.ref}` on a machine with internet (then copy the cache here), or {fix}"
    return False, f"model {mref.ref!r} ({role}) not found locally: {fix}"
