"""An exclusive lock on a run directory, so two ``editlens run`` processes
never score the same directory at once (they would do the work twice).

The lock is an ``flock`` on ``<run dir>/.lock``; the kernel releases it when
the process ends, however it ends, so a killed run never leaves a stale lock.
The file records who holds it (pid, host, command) for the message the
second process prints.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from editlens.errors import EditlensError, InputError


class RunLockedError(EditlensError):
    """Another process is running in this run directory."""


LOCK_FILE = ".lock"


def read_holder(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What the run's lock file says of its (last) holder: ``pid``, ``host``, ``command``, ``started``;
    ``{}`` when there is no readable record. Reads only: never takes the lock."""
    from editlens.core.io import read_json

    try:
        info = read_json(Path(run_dir) / LOCK_FILE)
    except InputError:  # none, or empty (the lock taken, its record not yet written)
        return {}
    return info if isinstance(info, dict) else {}


def holder_alive(run_dir: str | os.PathLike) -> bool | None:
    """Whether the process recorded in the run's lock file is alive: ``None`` when it cannot be told
    (no record, another host). Never takes the lock, so a run starting at that moment is not disturbed."""
    info = read_holder(run_dir)
    try:
        pid = int(info["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    if info.get("host") not in (None, socket.gethostname()):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return None
    return True


class RunLock:
    """Hold the lock of ``run_dir`` for the duration of a ``with`` block.

    Args:
        wait: queue behind the holder instead of failing at once.
        poll: seconds between tries while waiting.
        on_wait: called once with the holder's description when waiting starts.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d, RunLock(d):
    ...     try:
    ...         RunLock(d).acquire()
    ...     except RunLockedError as exc:
    ...         "is running in" in str(exc)
    True
    """

    def __init__(self, run_dir: str | os.PathLike, wait: bool = False, poll: float = 0.5,
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.dir = Path(run_dir)
        self.path = self.dir / LOCK_FILE
        self.wait = wait
        self.poll = poll
        self.on_wait = on_wait
        self._fd: int | None = None

    def holder(self) -> str:
        info = read_holder(self.dir)
        if not info:
            return "another process"
        cmd = " ".join(info.get("command") or [])
        return f"process {info.get('pid')} on {info.get('host')} (started {info.get('started')}" + \
            (f": {cmd})" if cmd else ")")

    def acquire(self) -> RunLock:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not self.wait:
                    who = self.holder()
                    os.close(fd)
                    raise RunLockedError(f"{self.dir}: {who} is running in this run directory. Wait for it to "
                                         "finish, pass --wait to queue behind it, or use another --out.") from None
                if not told and self.on_wait is not None:
                    self.on_wait(self.holder())
                    told = True
                time.sleep(self.poll)
        info: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "command": sys.argv,
                                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire() if self._fd is None else self

    def __exit__(self, *exc: Any) -> None:
        self.release()
