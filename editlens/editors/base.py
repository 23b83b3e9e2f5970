"""The editor interface: a batch of :class:`EditRequest` in, one image (or
the error that stopped it) per request out.

An editor records everything that decides its outputs: :meth:`Editor.settings`
(every generation setting) and :meth:`Editor.weights` (what the weights are,
with a hash), which ``editlens edit`` writes to its manifest.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from PIL import Image

from editlens.editors.spec import EditorSpec


@dataclass
class EditRequest:
    """One image to generate.

    Attributes:
        id: the edit's id (of the input manifest).
        sample: index of this sample among the ``--samples`` of the edit.
        source: the source image (RGB).
        instruction: the instruction as the user wrote it (the editor adds
            its own ``prompt_suffix``, if any, and reports the prompt it used).
        seed: the seed of this (edit, sample), derived by the caller.
        extra: the edit's other manifest fields (``mask``, ``reference``...).
    """

    id: str
    sample: int
    source: Image.Image
    instruction: str
    seed: int
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class EditOutput:
    """What an editor made of one request: ``image``, or ``error`` (a failed generation, redone on rerun);
    ``error == STOPPED``: a signal stopped it midway (not a failure: nothing is recorded, a rerun makes it)."""

    image: Image.Image | None = None
    error: str | None = None
    prompt: str | None = None  # the text the editor was given, when it differs from the instruction
    details: dict[str, Any] = field(default_factory=dict)


#: the error of an output that a stop request (Ctrl-C / SIGTERM) cut short
STOPPED = "stopped by a signal before it was finished"


def exited(editor: str, exc: SystemExit) -> str:
    """The failure of an image whose editor called ``sys.exit()`` (``SystemExit``)."""
    return (f"the editor {editor} called sys.exit({exc.code!r}) instead of returning an image; "
            "an editor must return an image or raise an exception")


class Editor:
    """Base class of editors. Subclasses implement :meth:`edit_batch`.

    ``stop_requested`` (set by :func:`editlens.runner.edit.generate_edits` while it runs) says whether a
    signal asked to stop: an editor that can stop midway (a diffusers pipeline, between two denoising
    steps) returns :data:`STOPPED` outputs instead of finishing the batch."""

    spec: EditorSpec
    #: recorded as the output manifest's ``model``
    name: str = "editor"
    #: edits per :meth:`edit_batch` call that ``editlens edit`` sends by default
    batch_size: int = 1
    stop_requested: Callable[[], bool] | None = None

    def edit_batch(self, requests: Sequence[EditRequest]) -> list[EditOutput]:
        raise NotImplementedError

    def edit_batches(self, batches: Iterable[list[EditRequest]]
                     ) -> Iterator[tuple[list[EditRequest], list[EditOutput], float]]:
        """``(requests, outputs, seconds)`` for each batch, in order: :meth:`edit_batch` one after
        the other. An editor spread over workers (:class:`~editlens.runner.executors.RayEditors`)
        runs several at once and yields them as they finish."""
        from editlens.errors import StopNow

        for requests in batches:
            t0 = time.perf_counter()
            try:
                outputs = list(self.edit_batch(requests))
            except StopNow:  # a second Ctrl-C / SIGTERM: stop now
                raise
            except SystemExit as exc:  # an editor that ends the process: its images fail, named
                outputs = [EditOutput(error=exited(self.name, exc)) for _ in requests]
            yield requests, outputs, time.perf_counter() - t0

    def settings(self) -> dict[str, Any]:
        """Every setting that decides the outputs (recorded; a resume with other settings is refused)."""
        return {}

    def weights(self) -> dict[str, Any]:
        """What the weights are: ``{"ref", "sha256", ...}`` (``sha256`` ``None`` when nothing local can be hashed)."""
        return {}

    def runtime(self) -> dict[str, Any]:
        """How it ran (device, dtype and why): recorded, but a resume on other hardware is allowed."""
        return {}

    def close(self) -> None:
        """Free what the editor holds (models, connections)."""
