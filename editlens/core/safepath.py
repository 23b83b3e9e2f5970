"""The one path-safety rule: a name that comes from data (a case id, a manifest
value, an output pattern filled with a row's fields) is turned into a file path
only *inside* the folder it is meant for.

:func:`inside` refuses, with :class:`~editlens.errors.UnsafePathError` naming
the value and the folder,

* a NUL byte (no file system accepts one; ``open`` would raise a bare ``ValueError``),
* an absolute path (``/etc/passwd``, ``C:\\x``),
* a ``..`` component (``../../escape``), even one that would come back in,
* a path whose real location (symbolic links followed) is not under the
  folder's real location (a link inside the folder pointing out of it).

The folder itself may be a symbolic link; what counts is where it really is.
Every place that builds a path from such a value goes through here: bench
outputs under ``--edits DIR/<model>/``, ``--edits`` joins of manifests, the
images an ``editlens edit`` folder's manifest names, and the images a report
or ``editlens view`` shows.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> inside(d, "sub/a.png") == d / "sub" / "a.png"
True
>>> inside(d, "../../escape_1.png", what="case id")
Traceback (most recent call last):
...
editlens.core.safepath.UnsafePathError: case id '../../escape_1.png' has a '..' component: not a file inside ...
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from editlens.errors import InputError


class UnsafePathError(InputError):
    """A value from the data would name a file outside the folder it belongs to."""


def problem(folder: str | os.PathLike, name: str | os.PathLike) -> str | None:
    """Why ``folder / name`` is not safely inside ``folder`` (``None``: it is)."""
    text = os.fspath(name)
    if "\0" in text:
        return "holds a NUL byte"
    if not text.strip():
        return "is empty"
    if PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or PureWindowsPath(text).drive:
        return "is an absolute path"
    parts = text.replace("\\", "/").split("/")
    if ".." in parts:
        return "has a '..' component"
    base = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(base, text))
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        return f"leads (through a symbolic link) to {real}"
    return None


def inside(folder: str | os.PathLike, name: str | os.PathLike, *, what: str = "name") -> Path:
    """``folder / name`` when it stays inside ``folder`` (see the module); else
    :class:`UnsafePathError` naming ``what``, the value, the problem and the folder."""
    why = problem(folder, name)
    if why is not None:
        raise UnsafePathError(f"{what} {os.fspath(name)!r} {why}: not a file inside {folder} (editlens reads "
                              "and writes only inside the folder meant for it)")
    return Path(folder) / os.fspath(name)


def is_inside(folder: str | os.PathLike, name: str | os.PathLike) -> bool:
    """Whether :func:`inside` accepts ``name`` under ``folder``."""
    return problem(folder, name) is None
