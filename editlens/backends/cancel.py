"""Stopping a local model's ``generate`` from another thread.

``editlens serve`` must stop generating when a client's deadline passes or
the server is asked to shut down (SIGTERM), instead of finishing a
2,000-token answer nobody will read. :func:`make_cancellable` adds a
transformers stopping criterion, checked after every generated token, to the
model of a backend. The criterion asks the predicate that the calling thread
set with :func:`cancel_scope`; generations outside such a scope (other users
of the same backend) are never stopped.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

_scope = threading.local()


@contextmanager
def cancel_scope(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Within the block, generations started by this thread stop at the next
    token once ``should_stop()`` returns True.

    >>> with cancel_scope(lambda: True):
    ...     current_check()()
    True
    >>> current_check() is None
    True
    """
    previous = getattr(_scope, "check", None)
    _scope.check = should_stop
    try:
        yield
    finally:
        _scope.check = previous


def current_check() -> Callable[[], bool] | None:
    return getattr(_scope, "check", None)


def make_cancellable(backend: Any) -> bool:
    """Wrap ``backend.model.generate`` (once) so :func:`cancel_scope` can stop it;
    ``False`` when the backend has no local model (HTTP backends need no such help)."""
    model = getattr(backend, "model", None)
    generate = getattr(model, "generate", None)
    if model is None or generate is None:
        return False
    original: Callable[..., Any] = generate  # bound here: the wrapper below keeps the unwrapped method
    if getattr(generate, "_editlens_cancellable", False):
        return True
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Stop(StoppingCriteria):
        def __init__(self, check: Callable[[], bool]) -> None:
            self.check = check

        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), bool(self.check()), dtype=torch.bool, device=input_ids.device)

    def cancellable(*args: Any, **kwargs: Any) -> Any:
        check = current_check()
        if check is not None:
            criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
            criteria.append(_Stop(check))
            kwargs["stopping_criteria"] = criteria
        return original(*args, **kwargs)

    cancellable._editlens_cancellable = True  # type: ignore[attr-defined]
    model.generate = cancellable
    return True
