"""What a report build may reuse from an earlier build of the same report.

``editlens view`` rebuilds a run's report every time the run writes a batch;
most thumbnails, bootstraps and samples have not changed since the last
build, so they are looked up rather than made again. A :class:`ReportCache`
holds all of that, and whoever builds owns it: ``write_run_report`` makes a
fresh one for each report, a :class:`~editlens.reporting.serve.ReportServer`
keeps one for its life. Nothing is kept by the process, so two reports built
in one process (two servers, a server and a ``report`` call, a test after
another) never see each other's entries.

>>> memo = Memo(2)
>>> memo.get_or_make("a", lambda: 1), memo.get_or_make("b", lambda: 2), memo.get_or_make("c", lambda: 3)
(1, 2, 3)
>>> "a" in memo, len(memo)
(False, 2)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable

if TYPE_CHECKING:
    from editlens.reporting.payload import SampleRecord


class Memo:
    """A bounded, thread-safe map that forgets its least recently used entry first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key: Hashable, value: Any) -> Any:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value under ``key``, made by ``make()`` (outside the lock) when absent."""
        hit = self.get(key)
        return hit if hit is not None else self.put(key, make())

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


@dataclass
class ReportCache:
    """The caches of one report, kept between its builds (see the module docstring).

    Entries are keyed by what they depend on (a file's identity, the values' content, a
    sample's rows and images), so a rebuild reuses only what is still true. The last
    two hold only what the latest build used: a growing run's next build reuses them.
    """

    #: thumbnails and image sizes, by file identity (path, size, modification time) and size asked
    images: Memo = field(default_factory=lambda: Memo(50_000))
    #: bootstraps, paired tests and correlations, by the content of their values
    stats: Memo = field(default_factory=lambda: Memo(20_000))
    #: the run's manifest, parsed, by file version and read options (a report follows one manifest)
    manifests: Memo = field(default_factory=lambda: Memo(1))
    #: evaluators' summary tables, by the content of their rows
    summaries: Memo = field(default_factory=lambda: Memo(64))
    #: processed samples of the latest build, by the content of their rows and images
    samples: dict[tuple, SampleRecord] = field(default_factory=dict)
    #: each sample's page JSON of the latest build, by its sample key and the box layers
    fragments: dict[tuple, str] = field(default_factory=dict)
