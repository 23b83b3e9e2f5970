"""Editors that are external programs: ``--editor 'command:PROGRAM ARGS...'``.

The contract: the command line is split like a shell would (``shlex``; no
shell runs it) and, per image, these placeholders in its arguments are
replaced:

* ``{source}``: path of the source image, written as PNG into a private temp folder;
* ``{instruction}``: the instruction (one argument, however many words);
* ``{seed}``: the image's seed (an integer; the program should seed its sampler with it);
* ``{out}``: the PNG path the program must write its edited image to;
* ``{id}``, ``{sample}``: the edit's id and the sample index.

``{out}`` is required. Exit status 0 and a readable image at ``{out}``: the
image is kept; anything else fails that image (its stderr's tail is
recorded; a rerun redoes it). ``timeout`` (seconds, default 600) bounds each run.

Each run is its own process group (a new session): on a time-out (or Ctrl-C)
the whole group is killed, children included, and whatever the program left
running in its group when it exited is ended too, so no editor process
outlives its image. Only the program's own exit is waited for: a background
child that keeps its stderr open does not hold the image back.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from editlens.editors.base import Editor, EditOutput, EditRequest
from editlens.editors.callable_editor import as_image
from editlens.errors import InputError

PLACEHOLDERS = ("source", "instruction", "seed", "out", "id", "sample")
_POSIX = hasattr(os, "killpg")


def _kill_group(proc: subprocess.Popen) -> None:
    """End ``proc`` and every process of its group (it leads its own session), then reap it."""
    if _POSIX:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone already
    elif proc.poll() is None:
        proc.kill()
    proc.wait()


class CommandEditor(Editor):
    """An external program as an editor (see the module docstring)."""

    def __init__(self, command: str | Sequence[str], name: str | None = None, timeout: float = 600.0,
                 batch_size: int = 1) -> None:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise InputError("command editor: empty command")
        if not any("{out}" in a for a in argv):
            raise InputError(f"command editor {command!r}: no {{out}} placeholder; the program must be told where "
                             f"to write its image (placeholders: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
        for a in argv:
            try:
                a.format(**{p: "" for p in PLACEHOLDERS})
            except (KeyError, IndexError, ValueError) as exc:
                raise InputError(f"command editor: argument {a!r} has an unknown or malformed placeholder ({exc}); "
                                 f"use {', '.join('{' + p + '}' for p in PLACEHOLDERS)} ({{{{ }}}} for a literal brace)") from None
        self.program = shutil.which(argv[0]) or (argv[0] if Path(argv[0]).is_file() else None)
        if self.program is None:
            raise InputError(f"command editor: program {argv[0]!r} not found (not on PATH, not a file)")
        self.argv = argv
        self.name = name or Path(argv[0]).name
        self.timeout = float(timeout)
        self.batch_size = int(batch_size)

    def settings(self) -> dict[str, Any]:
        return {"kind": "command", "argv": list(self.argv), "timeout": self.timeout}

    def weights(self) -> dict[str, Any]:
        path = Path(self.program or "")
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest = None
        return {"ref": self.argv[0], "path": str(path.resolve()) if digest else None, "sha256": digest}

    def _one(self, r: EditRequest, tmp: Path) -> EditOutput:
        src, out = tmp / f"source-{r.sample}.png", tmp / f"out-{r.sample}.png"
        r.source.convert("RGB").save(src)
        values = {"source": str(src), "instruction": r.instruction, "seed": str(r.seed), "out": str(out),
                  "id": r.id, "sample": str(r.sample)}
        argv = [a.format(**values) for a in self.argv]
        err_path = tmp / f"stderr-{r.sample}.txt"
        with open(err_path, "w+b") as err:
            try:
                # its own process group (session): a time-out ends the program and everything it started
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=_POSIX)
            except OSError as exc:
                return EditOutput(error=f"the command {self.name} could not start: {exc}")
            try:
                # the program itself is waited for, not its pipes: a background child it leaves behind
                # (holding stderr open) neither holds the image back nor turns it into a time-out
                code: int | None = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                _kill_group(proc)  # on time-out, Ctrl-C, or leftovers after it exited: the whole group
            err.seek(0)
            tail = err.read().decode("utf-8", "replace").strip()[-500:]
        if code is None:
            return EditOutput(error=f"the command {self.name} ran past {self.timeout:g} s (its process group was "
                                    "killed)" + (f": {tail}" if tail else ""))
        if code != 0:
            return EditOutput(error=f"the command {self.name} exited with status {code}" + (f": {tail}" if tail else ""))
        if not out.is_file():
            return EditOutput(error=f"the command {self.name} exited 0 but wrote no image to {out}"
                                    + (f": {tail}" if tail else ""))
        try:
            return EditOutput(image=as_image(out))
        except Exception as exc:  # noqa: BLE001  (whatever the program wrote, it is not an image)
            return EditOutput(error=f"the command's output is not a readable image: {exc}")

    def edit_batch(self, requests: Sequence[EditRequest]) -> list[EditOutput]:
        with tempfile.TemporaryDirectory(prefix="editlens-command-") as d:
            return [self._one(r, Path(d)) for r in requests]
