"""One place that turns a model reference into loaded weights.

A reference is a Hugging Face hub id (``openai/clip-vit-base-patch32``), a
local directory saved with ``save_pretrained``, or a role name (``clip``,
``dino``) that maps to one of those through, in order of precedence:

1. an explicit override (``--model clip=PATH`` on the CLI, ``models=`` in Python);
2. the environment variable ``EDITLENS_MODEL_<ROLE>`` (e.g. ``EDITLENS_MODEL_CLIP``);
3. the ``[models]`` table of the user config file (``$EDITLENS_CONFIG``, else
   ``$XDG_CONFIG_HOME/editlens/config.toml``, else ``~/.config/editlens/config.toml``);
4. the default of the role's preset (:mod:`editlens.models.registry`: ``clip`` ->
   ``openai/clip-vit-base-patch32``, ``dino`` -> ``facebook/dinov2-small``).

When weights are missing, :func:`load_pretrained` raises one
:class:`~editlens.errors.ModelUnavailableError` that says which model, where
editlens looked, and what to do.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from editlens.errors import ModelUnavailableError

if TYPE_CHECKING:
    from editlens.models.registry import ModelPreset


def config_path() -> Path:
    if os.environ.get("EDITLENS_CONFIG"):
        return Path(os.environ["EDITLENS_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "editlens" / "config.toml"


def _config_models() -> dict[str, str]:
    path = config_path()
    if not path.is_file():
        return {}
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelUnavailableError(f"{path}: cannot read the editlens config file ({exc})") from exc
    models = data.get("models", {})
    return {str(k): str(v) for k, v in models.items()} if isinstance(models, dict) else {}


@dataclass(frozen=True)
class ModelRef:
    """A resolved reference: what to load and where the name came from."""

    role: str | None
    ref: str
    origin: str  # "override", "env", "config", "default", "literal"

    @property
    def local_dir(self) -> Path | None:
        p = Path(self.ref).expanduser()
        return p if p.is_dir() else None



def model_reference(role_or_ref: str, overrides: Mapping[str, str] | None = None) -> ModelRef:
    """Resolve a role name (``clip``) or pass a literal id/path through."""
    overrides = overrides or {}
    role = role_or_ref
    if role in overrides:
        return ModelRef(role, overrides[role], "override")
    env = os.environ.get(f"EDITLENS_MODEL_{role.upper().replace('-', '_')}")
    if env:
        return ModelRef(role, env, "env")
    cfg = _config_models()
    if role in cfg:
        return ModelRef(role, cfg[role], "config")
    from editlens.models.registry import role_default

    default = role_default(role)
    if default:
        return ModelRef(role, default, "default")
    return ModelRef(None, role_or_ref, "literal")


def hub_cache_dir() -> str:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE

        return str(HF_HUB_CACHE)
    except Exception:  # pragma: no cover - very old huggingface_hub
        return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
        return isinstance(found, str)
    except Exception:
        return False


def _is_hub_id(ref: str) -> bool:
    parts = ref.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not ref.startswith((".", "~"))


def is_available(ref: ModelRef | str) -> bool:
    """True when the weights can be loaded without a network: a local
    directory with a ``config.json``, or a hub id already in the local cache."""
    mref = ref if isinstance(ref, ModelRef) else model_reference(ref)
    local = mref.local_dir
    if local is not None:
        return (local / "config.json").is_file()
    return _is_hub_id(mref.ref) and _in_hub_cache(mref.ref)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get(
        "TRANSFORMERS_OFFLINE", ""
    ).lower() in ("1", "true", "yes")


def _hub_host() -> str:
    from urllib.parse import urlparse

    return urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"


_REACHABLE: dict[str, bool] = {}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub opens within ``timeout`` seconds
    (name lookup included); remembered for the process."""
    import socket
    import threading

    host = _hub_host()
    if host not in _REACHABLE:
        ok: list[bool] = []

        def probe() -> None:
            try:
                socket.create_connection((host, 443), timeout=timeout).close()
                ok.append(True)
            except OSError:
                pass

        t = threading.Thread(target=probe, daemon=True)  # getaddrinfo has no time-out of its own
        t.start()
        t.join(timeout + 0.5)
        _REACHABLE[host] = bool(ok)
    return _REACHABLE[host]


def unavailable_message(mref: ModelRef, detail: str = "") -> str:
    role = f" (role '{mref.role}', from {mref.origin})" if mref.role else ""
    env = f"EDITLENS_MODEL_{(mref.role or 'ROLE').upper()}"
    lines = [f"model {mref.ref!r}{role} could not be loaded."]
    if detail:
        lines.append(f"  reason: {detail}")
    if mref.local_dir is not None or not _is_hub_id(mref.ref):
        lines.append(f"  looked in: the local path {Path(mref.ref).expanduser()}")
        lines.append("  fix: point to a directory written by `save_pretrained` (it must hold config.json and the weights).")
    else:
        lines.append(f"  looked in: the Hugging Face cache {hub_cache_dir()} and the hub (unreachable or offline)")
        # a reference given straight to a flag (--vlm HUB_ID) has no role: the fix is that flag with a folder
        instead = (f"--model {mref.role}=DIR, set {env}=DIR, or add it under [models] in {config_path()}"
                   if mref.role else "that directory in place of the hub id (e.g. --vlm DIR for a judge)")
        lines.append(
            f"  fix: on a machine with internet, run `hf download {mref.ref}` and copy "
            f"the cache folder here (or set HF_HOME to it); or save the model to a directory and pass {instead}."
        )
    return "\n".join(lines)


def load_pretrained(loader: Callable[..., Any], mref: ModelRef | str, **kwargs: Any) -> Any:
    """Call ``loader.from_pretrained`` on a resolved reference with one clear error.

    ``loader`` is a transformers class (``CLIPModel``, ``AutoTokenizer``...).
    Hub ids already in the cache load with ``local_files_only=True`` so a
    closed network costs no time-outs.
    """
    mref = mref if isinstance(mref, ModelRef) else model_reference(mref)
    local = mref.local_dir
    if local is None and not _is_hub_id(mref.ref):
        raise ModelUnavailableError(unavailable_message(mref, "no such directory"))
    target = str(local) if local is not None else mref.ref
    offline = local is not None or _in_hub_cache(mref.ref) or _offline()
    if local is None and _offline() and not _in_hub_cache(mref.ref):
        raise ModelUnavailableError(unavailable_message(mref, "not in the local cache and HF_HUB_OFFLINE is set"))
    if not offline and not hub_reachable():
        # fail now rather than after ~30 s of download retries
        raise ModelUnavailableError(unavailable_message(mref, f"not in the local cache and {_hub_host()} cannot be "
                                                              "reached (no network?)"))
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own progress bar is the one that matters
        loaded = loader.from_pretrained(target, local_files_only=offline, **kwargs)  # type: ignore[attr-defined]
    except (OSError, ValueError, EnvironmentError) as exc:
        raise ModelUnavailableError(unavailable_message(mref, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")) from exc
    from editlens.models import emulated_bf16

    emulated_bf16.install(loaded)  # bf16 asked for on a CPU without it: large products at float32 speed
    return loaded


def hub_model_available(preset: ModelPreset, models: dict[str, str]) -> tuple[bool, str | None]:
    """A preset whose weights are a hub id or folder: found locally (through its role's overrides)?"""
    mref = model_reference(preset.role or preset.ref or preset.name, models)
    if is_available(mref):
        return True, None
    return False, unavailable_message(mref, "not found locally")
