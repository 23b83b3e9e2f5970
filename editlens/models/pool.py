"""The one model pool: a loaded model (encoder, VLM backend, two-frame
scorer, ADIEE scorer...) is shared by everything in the process that asks
for it with the same settings, and loaded once even when several threads
ask at the same time.

A key is ``(kind, ...settings)``; the settings must hold everything that
changes the loaded weights or how they compute (reference, device, dtype,
quantisation). Loading happens outside the pool's own lock, under a lock of
its key, so a slow load never blocks other models.

>>> calls = []
>>> a = shared(("example", 1), lambda: calls.append(1) or object())
>>> shared(("example", 1), lambda: calls.append(1) or object()) is a, len(calls)
(True, 1)
>>> clear("example")
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")

_MODELS: dict[tuple[Hashable, ...], Any] = {}
_KEY_LOCKS: dict[tuple[Hashable, ...], threading.Lock] = {}
_LOCK = threading.Lock()


def shared(key: tuple[Hashable, ...], load: Callable[[], T]) -> T:
    """The model for ``key``, loaded by ``load()`` on first use."""
    with _LOCK:
        if key in _MODELS:
            return _MODELS[key]
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        with _LOCK:
            if key in _MODELS:
                return _MODELS[key]
        model = load()  # may raise: nothing is stored, the next call tries again
        with _LOCK:
            _MODELS[key] = model
        return model


def loaded(kind: str | None = None) -> list[tuple[Hashable, ...]]:
    """Keys of the models held now (of one kind)."""
    with _LOCK:
        return [k for k in _MODELS if kind is None or k[0] == kind]


def clear(kind: str | None = None) -> None:
    """Forget held models (all, or those of one kind), freeing their memory
    once nothing else refers to them."""
    with _LOCK:
        for k in [k for k in _MODELS if kind is None or k[0] == kind]:
            del _MODELS[k]
            _KEY_LOCKS.pop(k, None)
