"""One registry shape for everything editlens looks up by name (metrics,
editors, benchmarks), with one policy:

* **lazy targets**: an entry (or a spec's ``target``) may be a
  ``"module:attr"`` string, imported by :func:`load_target` only when it is
  used, so listing names imports nothing heavy;
* **loaded once, under a lock**: built-ins, then the plugins of an
  entry-point group, the first time the registry is read. The lock is
  re-entrant, so a plugin module may register while it is being loaded;
  other threads wait and never see a half-filled registry. A load that
  raises leaves the registry unloaded (the next read tries again);
* **a broken plugin is skipped**: it is warned about (``RuntimeWarning``
  naming the entry point and the error) and the others load;
* **built-ins are protected**: neither a plugin nor code can replace one;
  replacing something code or a plugin registered needs ``overwrite=True``;
* **unknown names** raise the registry's error with close matches.

>>> colours = Registry("colour", builtins=lambda: [("red", "#f00"), ("green", "#0f0")])
>>> colours.get("red")
'#f00'
>>> colours.get("rde")
Traceback (most recent call last):
...
LookupError: unknown colour 'rde'. Did you mean red?
"""

from __future__ import annotations

import difflib
import importlib
import threading
import warnings
from contextlib import contextmanager
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")
_MISSING = object()


def load_target(target: Any, what: str = "target") -> Any:
    """The object a ``"module:attr"`` string names (imported now; ``attr`` may
    be dotted); anything that is not a string is returned as it is.

    >>> load_target("os.path:join").__name__
    'join'
    """
    if not isinstance(target, str):
        return target
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{what} {target!r}: expected 'module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"{what} {target!r}: {module} has no attribute {attr!r}") from None
    return obj


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an object whose == fails is simply not the same
        return False


class Registry(Generic[T]):
    """Names -> entries of one sort, with the policy above.

    Args:
        what: what an entry is, for messages (``"metric"``).
        group: entry-point group of plugins (``"editlens.metrics"``); ``None``: no plugins.
        builtins: called once at the first read; returns ``(name, entry)``
            pairs (or registers with ``builtin=True`` itself and returns none).
        from_plugin: ``(loaded object, entry point) -> (name, entry)``; raise
            to refuse a plugin (it is then warned about and skipped). Default:
            the entry point's name and the object.
        key: turns a looked-up name into a key (``"CLIP-T"`` -> ``"clip_t"``).
        error: exception class raised for an unknown name.
        hint: text (or a function of no arguments giving it) ending the
            unknown-name message (``"Run `editlens metrics` to list them."``).
    """

    def __init__(self, what: str, *, group: str | None = None,
                 builtins: Callable[[], Iterable[tuple[str, T]]] | None = None,
                 from_plugin: Callable[[Any, EntryPoint], tuple[str, T]] | None = None,
                 key: Callable[[str], str] | None = None, error: type[Exception] = LookupError,
                 hint: str | Callable[[], str] = "") -> None:
        self.what = what
        self.group = group
        self._builtins = builtins
        self._from_plugin = from_plugin
        self._key = key
        self._error = error
        self._hint = hint
        self._entries: dict[str, T] = {}
        self._builtin: set[str] = set()
        self._lock = threading.RLock()
        self._loaded = False
        self._loading = False

    def fresh(self) -> Registry[T]:
        """A new, unloaded registry with this one's settings (tests use it to load again)."""
        return Registry(self.what, group=self.group, builtins=self._builtins, from_plugin=self._from_plugin,
                        key=self._key, error=self._error, hint=self._hint)

    # -- loading -------------------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        """Built-ins, then plugins, once. Re-entrant: a register call made while
        loading (a plugin module registering on import) goes straight in."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                for name, entry in (self._builtins() if self._builtins else ()):
                    self._put(name, entry, builtin=True)
                if self.group:
                    for ep in entry_points(group=self.group):
                        self._load_plugin(ep)
                self._loaded = True
            finally:
                self._loading = False

    def _load_plugin(self, ep: EntryPoint) -> None:
        try:
            obj = ep.load()
            name, entry = self._from_plugin(obj, ep) if self._from_plugin else (ep.name, obj)
        except Exception as exc:  # a broken plugin must not take the others down
            warnings.warn(f"editlens {self.what} plugin {ep.name!r} could not be loaded and is left out "
                          f"({ep.value}): {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=5)
            return
        old = self._entries.get(name, _MISSING)
        if old is _MISSING:
            self._entries[name] = entry
        elif not _same(old, entry):  # the same object: the plugin registered itself while loading
            warnings.warn(f"editlens {self.what} plugin {ep.name!r} ({ep.value}) registers {name!r}, which already "
                          f"exists; the plugin is left out (rename its {self.what})", RuntimeWarning, stacklevel=5)

    def _put(self, name: str, entry: T, *, builtin: bool) -> None:
        old = self._entries.get(name, _MISSING)
        if old is not _MISSING and not _same(old, entry):
            if name in self._builtin:
                raise ValueError(f"{self.what} {name!r} is built in and cannot be replaced; "
                                 "register it under another name")
            warnings.warn(f"{self.what} {name!r} was registered before the built-in of that name; "
                          "the built-in replaces it", RuntimeWarning, stacklevel=4)
        self._entries[name] = entry
        self._builtin.add(name)

    # -- changing ------------------------------------------------------------------------------
    def register(self, name: str, entry: T, *, overwrite: bool = False, builtin: bool = False) -> T:
        """Add ``entry`` under ``name``. A built-in cannot be replaced; another
        entry only with ``overwrite=True``; registering the same entry again is
        a no-op. ``builtin=True`` is for the package's own modules registering
        on import (it does not trigger loading the plugins)."""
        if builtin:
            with self._lock:
                self._put(name, entry, builtin=True)
            return entry
        self.ensure_loaded()
        with self._lock:
            old = self._entries.get(name, _MISSING)
            if old is not _MISSING and not _same(old, entry):
                if name in self._builtin:
                    raise ValueError(f"{self.what} {name!r} is built in and cannot be replaced; "
                                     "register it under another name")
                if not overwrite:
                    raise ValueError(f"{self.what} {name!r} is already registered")
            self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Take out an entry code or a plugin registered (absent: nothing to do; a built-in: refused)."""
        with self._lock:
            if name in self._builtin:
                raise ValueError(f"{self.what} {name!r} is built in and cannot be removed")
            self._entries.pop(name, None)

    @contextmanager
    def isolated(self) -> Iterator[Registry[T]]:
        """Registrations made inside the block are undone at its end (for tests and docs examples)."""
        self.ensure_loaded()
        with self._lock:
            entries, builtin = dict(self._entries), set(self._builtin)
        try:
            yield self
        finally:
            with self._lock:
                self._entries.clear()
                self._entries.update(entries)
                self._builtin.clear()
                self._builtin.update(builtin)

    # -- reading -------------------------------------------------------------------------------
    def key(self, name: str) -> str:
        return self._key(name) if self._key else name

    def get(self, name: str) -> T:
        """The entry called ``name``; the registry's error, with close matches, when there is none."""
        self.ensure_loaded()
        try:
            return self._entries[self.key(name)]
        except KeyError:
            raise self.unknown(name) from None

    def load(self, name: str) -> Any:
        """The entry called ``name`` with a ``"module:attr"`` entry imported (:func:`load_target`)."""
        return load_target(self.get(name), f"{self.what} {name!r}")

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Registered names close to ``name``."""
        return difflib.get_close_matches(self.key(name), self.names(), n=n)

    def unknown(self, name: str) -> Exception:
        """The error for an unknown ``name`` (with suggestions and the hint)."""
        close = self.suggest(name)
        hint = self._hint() if callable(self._hint) else self._hint
        text = f"unknown {self.what} {name!r}." + (f" Did you mean {', '.join(close)}?" if close else "")
        return self._error(text + (f" {hint}" if hint else ""))

    def is_builtin(self, name: str) -> bool:
        self.ensure_loaded()
        return self.key(name) in self._builtin

    def names(self) -> list[str]:
        """Registered names, in registration order (built-ins first)."""
        self.ensure_loaded()
        with self._lock:
            return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        self.ensure_loaded()
        with self._lock:
            return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        self.ensure_loaded()
        return isinstance(name, str) and self.key(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        state = f"{len(self._entries)} entries" if self._loaded else "not loaded"
        return f"Registry({self.what!r}, group={self.group!r}, {state})"
