"""Tiny random editing pipelines for tests and benchmarks (the builders live in
:mod:`editlens.editors.random_init`, which ``editlens make-tiny-editor`` uses),
and a scripted callable editor for resume and failure tests."""

from __future__ import annotations

from typing import Any

from editlens.editors.random_init import (  # noqa: F401
    IP2P_SIZES,
    TINY_EDITORS,
    build_flux_kontext,
    build_instruct_pix2pix,
    build_qwen_image_edit,
    make_tiny_editor,
)


def scripted_editor(image: Any, instruction: str, *, seed: int, edit_id: str = "") -> Any:
    """A deterministic callable editor for tests: the source blended half-way
    with a colour drawn from the seed. ``$EDITLENS_TEST_FAIL_IDS`` (comma-
    separated edit ids) makes those edits raise; ``$EDITLENS_TEST_KILL_AT``
    (an edit id) SIGKILLs the process when that edit is reached (a crash at
    a known point, for resume tests); ``$EDITLENS_TEST_TERM_AT`` sends SIGTERM."""
    import os
    import signal

    import numpy as np
    from PIL import Image

    if edit_id and edit_id == os.environ.get("EDITLENS_TEST_KILL_AT"):
        os.kill(os.getpid(), signal.SIGKILL)
    if edit_id and edit_id == os.environ.get("EDITLENS_TEST_TERM_AT"):
        os.kill(os.getpid(), signal.SIGTERM)  # a polite stop: the image in flight is finished first
    if edit_id in os.environ.get("EDITLENS_TEST_FAIL_IDS", "").split(","):
        raise RuntimeError(f"scripted failure of {edit_id}")
    colour = np.random.default_rng(seed).integers(0, 256, 3)
    arr = (np.asarray(image.convert("RGB"), dtype=np.float32) * 0.5 + colour * 0.5).astype(np.uint8)
    return Image.fromarray(arr)


def crash_once_editor(image: Any, instruction: str, *, seed: int, edit_id: str = "", kill_at: str = "",
                      marker: str = "") -> Any:
    """:func:`scripted_editor` (the same images) whose process SIGKILLs itself the first time it reaches
    edit ``kill_at``, writing its process id to the file ``marker`` first (later calls, in any process,
    go on): a worker that dies mid-batch, for the Ray executor's tests."""
    import os
    import signal
    from pathlib import Path

    if edit_id == kill_at and marker and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return scripted_editor(image, instruction, seed=seed, edit_id=edit_id)


def slow_editor(image: Any, instruction: str, *, seed: int, edit_id: str = "", seconds: float = 0.5) -> Any:
    """:func:`scripted_editor` (the same images) taking ``seconds`` per image: a run long enough to be
    killed half-way, for resume tests."""
    import time

    time.sleep(float(seconds))
    return scripted_editor(image, instruction, seed=seed, edit_id=edit_id)
