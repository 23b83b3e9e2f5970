"""Editors that are diffusers image-editing pipelines, from a folder or a hub id.

The family (:mod:`editlens.editors.spec`, presets in ``presets/``) is found
from ``model_index.json``'s ``_class_name`` (``family=`` or
``pipeline_class=`` override it); the family's preset gives the generation
defaults (steps, guidance, image guidance, resolution) and which pipeline
arguments they go to. A pipeline folder may carry ``editlens_editor.json``:
its ``prompt_suffix`` (written by ``editlens adiee tune-editor``) is appended
to every instruction (``prompt_suffix=""`` turns it off), and its
``settings`` (e.g. ``make-tiny-editor``'s native resolution) replace the
family's defaults; options given to the editor replace both.

Seeds: one CPU ``torch.Generator`` per request, seeded with the request's
own seed, so an image depends on its seed only, not on the batch it was made
in or the device.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from editlens.core.io import read_json
from editlens.editors.base import STOPPED, Editor, EditOutput, EditRequest
from editlens.editors.spec import EditorFamily, family_of_class
from editlens.editors.spec import family as family_preset
from editlens.errors import InputError, ModelUnavailableError

#: The file a tuned editor's folder carries next to model_index.json.
EDITOR_FILE = "editlens_editor.json"
#: Settings a user may override (``--editor-option KEY=VALUE``), besides the family's own.
SETTING_KEYS = ("steps", "guidance", "image_guidance", "true_cfg", "resolution", "negative_prompt", "auto_resize")
#: diffusers' own argument names, taken for the settings they set (``--editor-option num_inference_steps=30``)
SETTING_ALIASES = {"num_inference_steps": "steps", "guidance_scale": "guidance",
                   "image_guidance_scale": "image_guidance", "true_cfg_scale": "true_cfg"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt")


def _is_hub_id(ref: str) -> bool:
    parts = ref.split("/")
    return len(parts) == 2 and all(parts) and not ref.startswith((".", "~", "/"))


def _cached_hub_file(repo_id: str, filename: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename)
        return found if isinstance(found, str) else None
    except Exception:  # noqa: BLE001  (no cache, a malformed id: treated as not cached)
        return None


def missing_weights_message(ref: str, detail: str) -> str:
    """The evaluators' missing-weights message, worded for an editor."""
    from editlens.models.resolve import hub_cache_dir

    lines = [f"editor weights {ref!r} could not be loaded.", f"  reason: {detail}"]
    if not _is_hub_id(ref):
        lines.append(f"  looked in: the local path {Path(ref).expanduser()}")
        lines.append("  fix: point --editor to a folder written by a diffusers pipeline's `save_pretrained` "
                     "(it must hold model_index.json and one folder per component).")
    else:
        lines.append(f"  looked in: the Hugging Face cache {hub_cache_dir()} and the hub (unreachable or offline)")
        lines.append(f"  fix: on a machine with internet, run `hf download {ref}` and copy the cache folder here "
                     f"(or set HF_HOME to it); or save the pipeline to a folder and pass --editor DIR.")
    return "\n".join(lines)


def locate(ref: str) -> tuple[str, bool, dict[str, Any]]:
    """Where ``ref``'s pipeline loads from: ``(target, local_files_only, model_index)``.

    Raises :class:`ModelUnavailableError` (with the fix) when it cannot load here.
    """
    from editlens.models.resolve import _hub_host, _offline, hub_reachable

    local = Path(ref).expanduser()
    if local.is_dir():
        index = local / "model_index.json"
        if not index.is_file():
            raise ModelUnavailableError(missing_weights_message(ref, f"{local} has no model_index.json (not a "
                                                                     "diffusers pipeline folder)"))
        return str(local), True, read_json(index, "the pipeline's index")
    if not _is_hub_id(ref):
        raise ModelUnavailableError(missing_weights_message(ref, "no such directory"))
    cached = _cached_hub_file(ref, "model_index.json")
    if cached:
        return ref, True, read_json(cached, "the pipeline's index")
    if _offline():
        raise ModelUnavailableError(missing_weights_message(ref, "not in the local cache and HF_HUB_OFFLINE is set"))
    if not hub_reachable():
        raise ModelUnavailableError(missing_weights_message(ref, f"not in the local cache and {_hub_host()} cannot "
                                                                 "be reached (no network?)"))
    try:
        from huggingface_hub import hf_hub_download

        return ref, False, read_json(hf_hub_download(ref, "model_index.json"), "the pipeline's index")
    except Exception as exc:
        raise ModelUnavailableError(missing_weights_message(ref, f"{type(exc).__name__}: {exc}")) from exc


def weights_fingerprint(folder: Path) -> dict[str, Any]:
    """SHA-256 of every weight file under a pipeline folder, and one hash over them all."""
    from editlens.models.fingerprint import cached_sha256

    files = {str(p.relative_to(folder)): cached_sha256(p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.suffix in WEIGHT_SUFFIXES and not p.name.startswith(".")}
    overall = hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in files.items()).encode()).hexdigest()
    return {"sha256": overall if files else None, "files": files}


def fit_size(width: int, height: int, resolution: int | None, multiple: int) -> tuple[int, int]:
    """The generated size: the longer side ``resolution`` (aspect kept), both
    sides rounded down to ``multiple`` (at least one ``multiple``).

    >>> fit_size(640, 480, 512, 8)
    (512, 384)
    >>> fit_size(100, 50, None, 16)
    (96, 48)
    """
    w, h = float(width), float(height)
    if resolution:
        scale = resolution / max(w, h)
        w, h = w * scale, h * scale
    return max(multiple, int(w) // multiple * multiple), max(multiple, int(h) // multiple * multiple)


def _flag(value: Any, name: str) -> bool:
    """A boolean option as ``--editor-option`` gives it (JSON true/false, or a string)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise InputError(f"editor option {name}: expected true or false, got {value!r}")


@contextlib.contextmanager
def _tf32(on: bool) -> Iterator[None]:
    """TF32 for this call only (a process-wide torch switch; put back afterwards)."""
    if not on:
        yield
        return
    import torch

    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch < 2.9: the legacy switch only
        before_legacy = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before_legacy
        return
    # torch's newer switches (mixing them with the legacy allow_tf32 ones is an error in torch >= 2.9)
    switches = [torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv")]  # noqa: B009 (untyped)
    before = [sw.fp32_precision for sw in switches]
    for sw in switches:
        sw.fp32_precision = "tf32"
    try:
        yield
    finally:
        for sw, value in zip(switches, before, strict=True):
            sw.fp32_precision = value


class DiffusersEditor(Editor):
    """A diffusers image-editing pipeline.

    Args:
        weights: a folder written by ``save_pretrained`` or a hub id.
        family: a family preset name (default: from ``model_index.json``).
        pipeline_class: the diffusers class to load (default: the folder's own).
        prompt_suffix: appended to every instruction (default: the folder's
            ``editlens_editor.json``, else none; ``""`` turns it off).
        device, dtype: as the precision policy (:mod:`editlens.models.precision`) reads them.
        cpu_offload: keep components on the CPU until used (big pipelines on a small GPU).
        attention_slicing: compute attention in slices (less memory, slower).
        channels_last: keep the UNet's and the VAE's weights and activations
            channels-last (NHWC), the layout cuDNN's and oneDNN's fastest
            convolutions take; the sums' order changes (images differ in the
            last bits). Recorded in the run's ``runtime``. On a CPU it gains
            little (docs/editors.md, "Throughput").
        vae_slicing: run the VAE one image at a time within a batch (default:
            on a CPU, where a batched VAE costs more per image than one at
            a time: 256 px, float32, 8 per call: encoder 112 -> 180 ms,
            decoder 297 -> 371 ms per image; off on a GPU). Results equal
            an unsliced VAE's up to rounding. Recorded in ``runtime``.
        tf32: on CUDA in float32, let matrix products use TF32 tensor cores
            as torch already lets cuDNN's convolutions (10-bit mantissa
            products: faster; images differ more than channels-last's);
            recorded; nothing elsewhere.
        batch_size: edits per pipeline call (default: the family's).
        call: extra pipeline ``__call__`` arguments (recorded).
        name: the name recorded as the edits' ``model`` (default: the folder's or hub id's last part).
        settings: ``steps``, ``guidance``, ``image_guidance``, ``true_cfg``,
            ``resolution``, ``negative_prompt``, ``auto_resize`` override the family's.
    """

    def __init__(self, weights: str | os.PathLike | None = None, *, family: str | None = None,
                 pipeline_class: str | None = None, prompt_suffix: str | None = None, device: str = "auto",
                 dtype: str = "auto", cpu_offload: bool = False, attention_slicing: bool = False,
                 channels_last: bool = False, vae_slicing: bool | None = None, tf32: bool = False,
                 batch_size: int | None = None, call: Mapping[str, Any] | None = None, name: str | None = None,
                 **settings: Any) -> None:
        if not weights:
            raise InputError("a diffusers editor needs weights: a pipeline folder or a hub id")
        for alias, key in SETTING_ALIASES.items():
            if alias in settings:
                if key in settings:
                    raise InputError(f"editor options {alias} and {key} set the same thing; give one")
                settings[key] = settings.pop(alias)
        unknown = set(settings) - set(SETTING_KEYS)
        if unknown:
            raise InputError(f"unknown diffusers editor option(s) {', '.join(sorted(unknown))}; the options are "
                             f"{', '.join(SETTING_KEYS + tuple(SETTING_ALIASES) + ('family', 'pipeline_class', 'prompt_suffix', 'batch_size', 'call', 'name', 'cpu_offload', 'attention_slicing', 'channels_last', 'vae_slicing', 'tf32'))}")
        self.ref = str(weights)
        self.target, self.local_only, index = locate(self.ref)
        self.class_name = pipeline_class or str(index.get("_class_name") or "")
        folder = Path(self.target) if Path(self.target).is_dir() else None
        tuned = self._tuned_info(folder)
        fam_name = family or family_of_class(self.class_name) or tuned.get("family")
        if fam_name is None:
            raise InputError(f"editor {self.ref}: its pipeline class {self.class_name or '(none)'} is in no editor "
                             "family preset; name one with --editor-option family=NAME, or use family=custom with "
                             "--editor-option pipeline_class=CLASS")
        self.family: EditorFamily = family_preset(fam_name)
        if not self.class_name:
            self.class_name = self.family.pipeline_classes[0] if self.family.pipeline_classes else ""
        self.folder_settings = self._folder_settings(tuned, folder)
        self.values = {**self.family.settings, **self.folder_settings,
                       **{k: v for k, v in settings.items() if v is not None}}
        self.call_extra = dict(call or {})
        self.prompt_suffix = tuned.get("prompt_suffix", "") if prompt_suffix is None else prompt_suffix
        self.suffix_origin = ("option" if prompt_suffix is not None else EDITOR_FILE if tuned.get("prompt_suffix")
                              else None)
        self.tuned_source = tuned.get("source")
        self.batch_size = int(batch_size or self.family.batch_size)
        self.name = name or Path(self.ref.rstrip("/")).name
        self.cpu_offload, self.attention_slicing = bool(cpu_offload), bool(attention_slicing)
        self.channels_last, self.tf32 = _flag(channels_last, "channels_last"), _flag(tf32, "tf32")
        self.vae_slicing = None if vae_slicing is None else _flag(vae_slicing, "vae_slicing")
        self._vae_sliced = False
        self._folder = folder
        self._device, self._dtype = device, dtype
        self._pipe: Any = None
        self._precision: Any = None
        self._weights: dict[str, Any] | None = None

    @staticmethod
    def _tuned_info(folder: Path | None) -> dict[str, Any]:
        if folder is None or not (folder / EDITOR_FILE).is_file():
            return {}
        path = folder / EDITOR_FILE
        data = read_json(path, "a tuned editor's settings")
        if not isinstance(data, dict) or not isinstance(data.get("prompt_suffix", ""), str):
            raise InputError(f"{path}: expected an object whose prompt_suffix is a string")
        return data

    @staticmethod
    def _folder_settings(card: Mapping[str, Any], folder: Path | None) -> dict[str, Any]:
        found = card.get("settings") or {}
        where = f"{folder / EDITOR_FILE if folder else EDITOR_FILE}: settings"
        if not isinstance(found, dict):
            raise InputError(f"{where} must be an object of generation settings")
        unknown = set(found) - set(SETTING_KEYS)
        if unknown:
            raise InputError(f"{where}: unknown setting(s) {', '.join(sorted(unknown))}; the settings are "
                             f"{', '.join(SETTING_KEYS)}")
        return dict(found)

    # -- recorded -------------------------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return {"kind": "diffusers", "family": self.family.family, "pipeline_class": self.class_name,
                **self.values, "call": dict(self.call_extra), "prompt_suffix": self.prompt_suffix,
                "prompt_suffix_from": self.suffix_origin, "size_multiple": self.family.size_multiple,
                "settings_from_folder": sorted(self.folder_settings),
                "seeding": "one CPU torch.Generator per image, seeded with its seed"}

    def weights(self) -> dict[str, Any]:
        if self._weights is None:
            info: dict[str, Any] = {"ref": self.ref}
            folder = self._folder
            if folder is None:
                cached = _cached_hub_file(self.ref, "model_index.json")
                folder = Path(cached).parent if cached else None
                if folder is not None:
                    info["revision"] = folder.name  # hub cache snapshots are named by commit
            if folder is not None:
                info["path"] = str(folder.resolve())
                info.update(weights_fingerprint(folder))
            else:
                info["sha256"] = None
            if self.tuned_source is not None:
                info["tuned_from"] = self.tuned_source
            self._weights = info
        return self._weights

    def runtime(self) -> dict[str, Any]:
        self.load()
        # offload moves components between a GPU and the CPU: on a CPU there is nothing to offload
        offloaded = self.cpu_offload and self._precision.device.startswith("cuda")
        return {"precision": self._precision.to_dict(), "cpu_offload": offloaded,
                "attention_slicing": self.attention_slicing, "channels_last": self.channels_last,
                "vae_slicing": self._vae_sliced, "tf32": self._uses_tf32(), "batch_size": self.batch_size}

    def _uses_tf32(self) -> bool:
        return self.tf32 and self._precision.device.startswith("cuda") and self._precision.dtype == "float32"

    # -- generation -----------------------------------------------------------------------------------------------
    def load(self) -> Any:
        if self._pipe is not None:
            return self._pipe
        import diffusers

        from editlens.models import emulated_bf16
        from editlens.models.precision import decide

        self._precision = decide(self._dtype, self._device, "inference", preferred=self.family.dtype.get("cuda"))
        cls = getattr(diffusers, self.class_name, None)
        if cls is None:
            raise InputError(f"editor {self.ref}: diffusers {diffusers.__version__} has no pipeline class "
                             f"{self.class_name!r}")
        try:
            from diffusers.utils import logging as dlog

            dlog.disable_progress_bar()
            with warnings.catch_warnings():  # newer diffusers renames torch_dtype; older ones know only it
                warnings.simplefilter("ignore", FutureWarning)
                pipe = cls.from_pretrained(self.target, torch_dtype=self._precision.torch_dtype,
                                           local_files_only=self.local_only)
        except (OSError, ValueError) as exc:
            raise ModelUnavailableError(missing_weights_message(
                self.ref, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")) from exc
        pipe.set_progress_bar_config(disable=True)  # editlens' own progress bar counts edits
        if self.attention_slicing:
            pipe.enable_attention_slicing()
        if self.cpu_offload and self._precision.device.startswith("cuda"):
            pipe.enable_model_cpu_offload(device=self._precision.device)
        else:
            pipe.to(self._precision.device)
        if self._precision.dtype == "bfloat16":
            for component in pipe.components.values():
                emulated_bf16.install(component)
        vae = getattr(pipe, "vae", None)
        slicing = self.vae_slicing if self.vae_slicing is not None else not self._precision.device.startswith("cuda")
        if slicing and vae is not None and hasattr(vae, "enable_slicing") and hasattr(vae, "use_slicing"):
            vae.enable_slicing()
            self._vae_sliced = True
        if self.channels_last:
            import torch

            for name in ("unet", "vae", "transformer"):  # the convolutional parts (a transformer's are few)
                module = getattr(pipe, name, None)
                if isinstance(module, torch.nn.Module):
                    module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self._pipe = pipe
        return pipe

    def prompt(self, instruction: str) -> str:
        return instruction.rstrip() + self.prompt_suffix if self.prompt_suffix else instruction

    def edit_batch(self, requests: Sequence[EditRequest]) -> list[EditOutput]:
        import torch

        pipe = self.load()
        out: list[EditOutput | None] = [None] * len(requests)
        # one pipeline call per generated size: a batch's images must share it
        by_size: dict[tuple[int, int], list[int]] = {}
        for i, r in enumerate(requests):
            size = fit_size(*r.source.size, self.values.get("resolution"), self.family.size_multiple)
            by_size.setdefault(size, []).append(i)
        for (w, h), idx in by_size.items():
            prompts = [self.prompt(requests[i].instruction) for i in idx]
            images = [requests[i].source.convert("RGB").resize((w, h), Image.Resampling.BICUBIC) for i in idx]
            kwargs: dict[str, Any] = {"prompt": prompts, "image": images,
                                      "generator": [torch.Generator("cpu").manual_seed(requests[i].seed) for i in idx]}
            for key, arg in self.family.call.items():
                if key == "height":
                    kwargs[arg] = h
                elif key == "width":
                    kwargs[arg] = w
                elif key == "max_area":  # Kontext sizes its output by area
                    kwargs[arg] = w * h
                elif self.values.get(key) is not None:
                    value = self.values[key]
                    kwargs[arg] = [value] * len(idx) if key == "negative_prompt" else value
            kwargs.update(self.call_extra)
            stop = self.stop_requested
            if stop is not None and "callback_on_step_end" in inspect.signature(type(pipe).__call__).parameters:
                kwargs["callback_on_step_end"] = _stop_between_steps(stop)
            try:
                if stop is not None and stop():
                    raise _Stopped
                with torch.inference_mode(), _tf32(self._uses_tf32()):
                    made = pipe(**kwargs).images
                if len(made) != len(idx):
                    raise RuntimeError(f"the pipeline returned {len(made)} images for {len(idx)} prompts")
                for i, img, p in zip(idx, made, prompts, strict=True):
                    out[i] = EditOutput(image=img, prompt=p if p != requests[i].instruction else None)
            except _Stopped:  # a signal: these images are not made (nor failed); a rerun makes them
                for i in idx:
                    out[i] = EditOutput(error=STOPPED)
            except (RuntimeError, ValueError, TypeError) as exc:
                # a failed call fails its images (redone on rerun); bad setup errors surface at load()
                for i in idx:
                    out[i] = EditOutput(error=f"{type(exc).__name__}: {exc}")
        return [o if o is not None else EditOutput(error="not generated") for o in out]

    def close(self) -> None:
        self._pipe = None


def load_for_loader(ref: Any, precision: Any, quantization: str, models: dict[str, str],
                    **options: Any) -> DiffusersEditor:
    """The ``editor`` kind's loader (:func:`editlens.models.loader.load_model`): a pipeline folder
    (one ``adiee tune-editor`` or ``make-tiny-editor`` wrote) as a :class:`DiffusersEditor`;
    ``options`` are the editor's (``steps=``, ``prompt_suffix=`` ...)."""
    if quantization not in ("none", "auto"):
        raise InputError(f"{ref.ref}: a diffusers editor does not load in {quantization}")
    return DiffusersEditor(str(ref.local_dir or ref.ref), device=precision.device, dtype=precision.dtype, **options)


class _Stopped(Exception):
    """Raised between two denoising steps when a signal asked to stop."""


def _stop_between_steps(stop: Any) -> Any:
    def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        if stop():
            raise _Stopped
        return tensors

    return callback
