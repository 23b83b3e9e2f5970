"""Editors that are Python functions: ``--editor module:function``.

The function is called once per image::

    def my_editor(image: PIL.Image.Image, instruction: str, *, seed: int, **kw) -> PIL.Image.Image

It may return a PIL image, an ``HxWx3`` uint8 array or a path of an image
file. Keyword arguments it declares among ``edit_id``, ``sample`` and
``extra`` (the edit's other manifest fields) are passed too. An exception
fails that image (redone on rerun); so does ``sys.exit()`` (named in the
failure: it never ends editlens as a success).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from editlens.editors.base import Editor, EditOutput, EditRequest, exited
from editlens.errors import InputError


def identity_edit(image: Image.Image, instruction: str, *, seed: int) -> Image.Image:
    """The do-nothing editor (returns the source): a baseline, and the callable kind's example."""
    return image.copy()


def as_image(value: Any) -> Image.Image:
    """A PIL image from what an editor returned (PIL image, uint8 HxWx3 array, or a file path)."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, (str, Path, io.BytesIO)):
        with Image.open(value) as im:
            return im.convert("RGB")
    import numpy as np

    if isinstance(value, np.ndarray) and value.ndim == 3 and value.shape[2] in (3, 4) and value.dtype == np.uint8:
        return Image.fromarray(value[..., :3])
    raise TypeError(f"an editor returned a {type(value).__name__}; expected a PIL image, an HxWx3 uint8 array or "
                    "an image path")


class CallableEditor(Editor):
    """A Python function as an editor (see the module docstring)."""

    def __init__(self, function: str | Callable[..., Any], name: str | None = None, batch_size: int = 1,
                 **settings: Any) -> None:
        if callable(function):
            self.fn, self.ref = function, f"{function.__module__}:{function.__qualname__}"
        else:
            module, sep, attr = str(function).partition(":")
            if not sep or not module or not attr:
                raise InputError(f"--editor {function!r}: a callable editor is module:function")
            try:
                self.fn = getattr(importlib.import_module(module), attr)
            except ImportError as exc:
                raise InputError(f"--editor {function}: cannot import {module} ({exc})") from None
            except AttributeError:
                raise InputError(f"--editor {function}: module {module} has no {attr!r}") from None
            if not callable(self.fn):
                raise InputError(f"--editor {function}: {attr} is not callable")
            self.ref = str(function)
        self.name = name or str(getattr(self.fn, "__name__", "callable"))
        self.batch_size = int(batch_size)
        self.extra_settings = dict(settings)
        params = inspect.signature(self.fn).parameters
        takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
        self._pass = [k for k in ("edit_id", "sample", "extra") if takes_all or k in params]
        self._settings_kw = dict(settings) if takes_all or set(settings) <= set(params) else None
        if settings and self._settings_kw is None:
            raise InputError(f"--editor {self.ref}: the function takes none of the options "
                             f"{', '.join(sorted(set(settings) - set(params)))}")

    def settings(self) -> dict[str, Any]:
        return {"kind": "callable", "function": self.ref, **self.extra_settings}

    def weights(self) -> dict[str, Any]:
        """The function's source file hashed (what decides its outputs, as near as Python can tell)."""
        try:
            path = Path(inspect.getsourcefile(self.fn) or "")
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        except (TypeError, OSError):
            path, digest = Path(), None
        return {"ref": self.ref, "path": str(path) if digest else None, "sha256": digest}

    def edit_batch(self, requests: Sequence[EditRequest]) -> list[EditOutput]:
        out = []
        for r in requests:
            kw: dict[str, Any] = {"seed": r.seed, **(self._settings_kw or {})}
            given = {"edit_id": r.id, "sample": r.sample, "extra": dict(r.extra)}
            kw.update({k: given[k] for k in self._pass})
            try:
                out.append(EditOutput(image=as_image(self.fn(r.source.copy(), r.instruction, **kw))))
            except Exception as exc:  # noqa: BLE001  (a user's function: any error fails this image only)
                out.append(EditOutput(error=f"{type(exc).__name__}: {exc}"))
            except SystemExit as exc:  # sys.exit() in the function must not end editlens as a success
                out.append(EditOutput(error=exited(self.ref, exc)))
        return out
