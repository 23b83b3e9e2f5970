"""Exceptions that carry a message a user can act on.

Every error raised for bad input names the thing at fault (a file, a manifest
line, a model) and the problem, so that callers never have to read a torch
traceback to learn what went wrong.
"""

from __future__ import annotations


class EditlensError(Exception):
    """Base class of all errors editlens raises on purpose."""


class InputError(EditlensError, ValueError):
    """An input (image, instruction, array) is missing or unusable."""


class ManifestError(EditlensError, ValueError):
    """A dataset manifest has rows that cannot be used.

    ``problems`` holds one ``(line_number, reason)`` per bad row.
    """

    def __init__(self, path: str, problems: list[tuple[int, str]], unit: str = "line"):
        self.path = path
        self.problems = problems
        shown = "\n".join(f"  {unit} {line}: {reason}" for line, reason in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(
            f"{path}: {len(problems)} bad row(s)\n{shown}{more}\n"
            "Fix the rows, or pass skip_invalid=True (CLI: --skip-invalid) to drop them."
        )


class ModelUnavailableError(EditlensError, RuntimeError):
    """A model's weights cannot be found or loaded."""


class UnknownMetricError(EditlensError, KeyError):
    """A metric name that is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "unknown metric"


class StopNow(SystemExit):
    """A second SIGTERM while a run stops after its batch in flight: stop at once (exit 128 + signal).
    Its own type, so that code which fails an editor's images when the editor calls ``sys.exit()``
    lets this one through."""
