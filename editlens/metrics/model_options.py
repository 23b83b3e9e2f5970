"""The options of a metric that encodes images or text with a shared model
(CLIP, DINOv2): which model, device and dtype, and its fingerprint for
run manifests. Public so evaluators outside :mod:`editlens.metrics`
(DICE's masked CLIP metrics) reuse it without reaching into privates."""

from __future__ import annotations

from typing import Any

from editlens.models.encoders import get_encoder


class EncoderModelOptions:
    """Mixin: set ``kind`` (``"clip"``, ``"dino"``) and call :meth:`_init_model`."""

    kind = "clip"

    def _init_model(self, model: str | None, device: str, dtype: str, models: dict[str, str] | None) -> None:
        self.model_name = model
        self.device = device
        self.dtype = dtype
        self.model_overrides = dict(models or {})
        self._encoder: Any = None

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = get_encoder(self.kind, self.model_name, self.device, self.dtype, self.model_overrides)
        return self._encoder

    def model_describe(self) -> dict[str, Any]:
        from editlens.models.fingerprint import fingerprint
        from editlens.models.precision import decide, resolve_device
        from editlens.models.resolve import model_reference

        # weight hashes and the dtype are part of the settings: new weights or
        # another precision mean new results (and the manifest says which ran)
        dtype = str(decide(self.dtype, resolve_device(self.device)).torch_dtype).replace("torch.", "")
        return {**fingerprint(model_reference(self.model_name or self.kind, self.model_overrides)), "dtype": dtype}
