"""Job-array shards: ``--shard I/N`` gives this process the edits (or samples, or
cases) whose id hashes to ``I`` of ``N``; ``editlens runs merge`` joins the shards'
folders into the one folder a single process would have written.

The split depends on the id alone (:func:`shard_of`: SHA-256 of the id, modulo
``N``), not on the order of the input, the machine or the Python version, so
every array task computes the same split without talking to the others, and a
rerun of a task resumes its own shard.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from editlens.errors import InputError

T = TypeVar("T")


def shard_of(key: str, count: int) -> int:
    """The shard (``0..count-1``) of the id ``key``.

    >>> [shard_of(f"e{i}", 2) for i in range(6)]
    [1, 0, 0, 1, 0, 1]
    """
    return int.from_bytes(hashlib.sha256(str(key).encode("utf-8")).digest()[:8], "big") % int(count)


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``--shard index/count``)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, key: str) -> bool:
        return shard_of(key, self.count) == self.index

    def select(self, items: Iterable[T], key: Callable[[T], str]) -> list[T]:
        """The items of this shard, in their order."""
        return [it for it in items if self.owns(key(it))]


def parse_shard(text: str | None) -> Shard | None:
    """``"I/N"`` (``0 <= I < N``) as a :class:`Shard`; ``None`` stays ``None``.

    SLURM arrays count from 0 (``--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``).
    """
    if text is None or text == "":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise InputError(f"--shard {text!r}: expected I/N, e.g. 0/4 (shard I of N, counted from 0)")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or index >= count:
        raise InputError(f"--shard {text}: I must be 0..N-1 (shards are counted from 0), got I={index}, N={count}")
    return Shard(index, count)


def ids_digest(rows: Sequence[Sequence[Any]]) -> str:
    """A fingerprint of the whole input (every shard computes it before taking its part):
    shards made from different data are refused by ``runs merge``."""
    h = hashlib.sha256()
    for row in rows:
        h.update(("\x1f".join(str(v) for v in row) + "\x1e").encode("utf-8"))
    return h.hexdigest()


def shard_record(shard: Shard, ids: Sequence[str], fingerprint: str, kind: str, **extra: Any) -> dict[str, Any]:
    """What a shard folder's ``shard.json`` holds: its ``kind`` (``edit``, ``run``, ``bench``), the shard, the whole input's ids in order
    (the merged folder keeps the single run's order) and its fingerprint."""
    return {"schema": "editlens.shard/1", "kind": kind, "shard": str(shard), "index": shard.index, "count": shard.count,
            "inputs_sha256": fingerprint, "ids": list(ids), **extra}
