"""The one atomic write: a crash, a full disk or Ctrl-C leaves either the old
file or the complete new one, never a half-written one.

Every file editlens writes for later reading (run outputs, checkpoints,
caches, plots, exported models) goes through here:

* :func:`atomic_write` — write through a callback into a temp file in the
  target's own folder (so the final rename never crosses file systems),
  flush, ``fsync``, then ``os.replace`` over the target. (The folder itself is
  not synced: after a power cut the rename may be lost, which leaves the old
  file — still whole.)
* :func:`write_text`, :func:`write_bytes`, :func:`write_json`,
  :func:`write_jsonl`, :func:`torch_save` — the usual payloads.
* :func:`atomic_directory` — a folder (a model, a checkpoint) built in a temp
  folder beside the target and renamed into place when complete.

And the one reader of what was written: :func:`read_json`, :func:`iter_jsonl`
and :func:`read_jsonl` raise :class:`~editlens.errors.InputError` naming the
file (and line) and the problem, never a bare ``json`` or ``OSError`` traceback.

Temp names start with ``.`` and end with ``.tmp``; a write that fails
removes its temp file and re-raises.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from editlens.errors import InputError

__all__ = ["atomic_write", "write_text", "write_bytes", "write_json", "write_jsonl", "torch_save",
           "atomic_directory", "read_json", "iter_jsonl", "read_jsonl"]


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it; read once
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[Any]], Any], mode: str = "w") -> Path:
    """Write through ``write(fh)`` into a temp file beside ``path``, then rename it over ``path``.

    ``mode`` is ``"w"`` (UTF-8 text, no newline translation) or ``"wb"``.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = atomic_write(p, lambda fh: fh.write("hello"))
    >>> p.read_text()
    'hello'
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); outputs get the permissions of
        # any file the user writes (0666 less the umask)
        os.chmod(tmp, 0o666 & ~_umask())
        text = "b" not in mode
        with os.fdopen(fd, mode, encoding="utf-8" if text else None, newline="" if text else None) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda fh: fh.write(text))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data), mode="wb")


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2, **kwargs: Any) -> Path:
    """``obj`` as JSON (``kwargs`` go to :func:`json.dumps`, e.g. ``default=str``).

    Serialised before the file is opened: an unserialisable object leaves the old file alone.
    """
    text = json.dumps(obj, indent=indent, **kwargs)
    return write_text(path, text + ("\n" if indent is not None else ""))


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any], **kwargs: Any) -> Path:
    """One JSON object per line."""
    text = "".join(json.dumps(r, **kwargs) + "\n" for r in rows)
    return write_text(path, text)


def torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)``, atomically."""
    import torch

    return atomic_write(path, lambda fh: torch.save(obj, fh), mode="wb")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Build a folder in a temp folder beside ``path``; on success it replaces ``path``.

    An existing ``path`` is moved aside (``.NAME.*.old``) and removed only once
    the new folder is in place; if anything fails before, the temp folder is
    removed and ``path`` is left as it was. (Two renames: a crash between them
    leaves the old folder under its ``.old`` name, never a half-written one.)

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> with atomic_directory(root / "model") as tmp:
    ...     _ = (tmp / "weights.bin").write_bytes(b"123")
    >>> sorted(p.name for p in (root / "model").iterdir())
    ['weights.bin']
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.rmdir(old)
            os.replace(target, old)
            try:
                os.replace(tmp, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # only left when something failed


def _missing(p: Path, what: str, hint: str) -> InputError:
    return InputError(f"{p}: {'no such file' if not p.exists() else 'not a file'}"
                      + (f" ({what})" if what else "") + (f"; {hint}" if hint else ""))


def read_json(path: str | os.PathLike, what: str = "", hint: str = "") -> Any:
    """The JSON document in ``path``; ``what`` says what the file is for (in
    the error), ``hint`` what to do about it.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.json")
    >>> _ = open(p, "w").write('{"a": 1')
    >>> read_json(p, "run summary")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    editlens.errors.InputError: ...x.json: not valid JSON (run summary): Expecting ',' delimiter: line 1 column 8 (char 7)
    """
    p = Path(path)
    if not p.is_file():
        raise _missing(p, what, hint)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text" + (f" ({what})" if what else "") + f": {exc.reason}") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot be read" + (f" ({what})" if what else "") + f": {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"{p}: not valid JSON" + (f" ({what})" if what else "") + f": {exc}") from None


def iter_jsonl(path: str | os.PathLike, missing_hint: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path``.

    Raises :class:`InputError` naming the file (and line) when the file is
    missing, is not UTF-8, holds a line that is not JSON, or a line that is
    not a JSON object.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.jsonl")
    >>> _ = open(p, "w").write('{"a": 1}\\n\\n[2]\\n')
    >>> next(iter_jsonl(p))
    (1, {'a': 1})
    >>> list(iter_jsonl(p))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    editlens.errors.InputError: ...x.jsonl:3: expected a JSON object, got list
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found" + (f" ({missing_hint})" if missing_hint else ""))
    with open(p, encoding="utf-8") as fh:
        n = 0
        try:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise InputError(f"{p}:{n}: expected a JSON object, got {type(row).__name__}")
                yield n, row
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}:{n + 1}: not UTF-8 text ({exc.reason})") from None


def read_jsonl(path: str | os.PathLike, missing_hint: str = "") -> list[dict[str, Any]]:
    """Every object of a JSON-lines file, in order (errors as :func:`iter_jsonl`)."""
    return [row for _, row in iter_jsonl(path, missing_hint)]
