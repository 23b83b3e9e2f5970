"""Helpers shared by CLI commands."""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence

import typer

from editlens.errors import EditlensError

#: Exit status of a command that finished and wrote everything, but some results
#: *failed* (transport errors, crashes; a rerun retries them). ``--allow-failures``: 0.
EXIT_FAILED = 3
#: Exit status of a run stopped by a signal: 128 + the signal's number (Ctrl-C 130, SIGTERM 143).
EXIT_SIGNAL_BASE = 128


def parse_models(items: Sequence[str] | None, flag: str = "--model",
                 form: str = "ROLE=HUB_ID_OR_DIR (e.g. clip=./my-clip)") -> dict[str, str]:
    """``["clip=/models/clip"]`` -> ``{"clip": "/models/clip"}``."""
    out = {}
    for item in items or []:
        role, sep, ref = item.partition("=")
        if not sep or not role or not ref:
            raise typer.BadParameter(f"{flag} {item!r} must look like {form}")
        out[role.strip()] = ref.strip()
    return out


def split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise typer.BadParameter("--metrics needs at least one name")
    return names


def output_file(path: Any, flag: str = "--out") -> Any:
    """``path`` when it can be written as a file: an existing folder there is a message and
    exit 2 before any work, never a traceback after it."""
    from pathlib import Path

    from editlens.errors import InputError

    if path is not None and Path(path).is_dir():
        raise InputError(f"{flag} {path}: is a folder; give a file name")
    return path


def output_dir(path: Any, flag: str = "--out") -> Any:
    """``path`` when it can be a folder: an existing file there is a message and exit 2."""
    from pathlib import Path

    from editlens.errors import InputError

    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise InputError(f"{flag} {path}: is a file; give a folder")
    return path


def require_samples(report: Any, manifest: Any) -> None:
    """Every manifest row skipped as invalid: nothing to score is a message and exit 2, not a summary of zeros."""
    if not report.samples:
        from editlens.core.evidence import not_measured
        from editlens.errors import InputError

        raise InputError(f"{manifest}: {not_measured(0, f'all {len(report.problems)} rows were skipped as invalid')}")


def skipped_lines(skipped: Any) -> None:
    """The metrics that could not run, one stderr line per distinct reason (the metrics it stops named
    together), so five CLIP metrics missing one model read as one line, not five."""
    by: dict[str, list[str]] = {}
    for name, reason in skipped:
        by.setdefault(str(reason), []).append(name)
    for reason, names in by.items():
        typer.echo(f"metric{'s' if len(names) > 1 else ''} {', '.join(names)} skipped: {reason}", err=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str, allow_nan=False) + "\n")


def fail(exc: BaseException) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code=2)


#: optional packages -> the editlens extra that installs them (pyproject.toml's optional-dependencies)
EXTRAS = {"diffusers": "editors", "pyarrow": "parquet", "datasets": "datasets", "ray": "ray",
          "bitsandbytes": "quant", "tensorboard": "tracking", "wandb": "wandb"}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The message for an optional package that is not installed: which extra brings it.

    >>> missing_extra(ModuleNotFoundError("No module named 'diffusers'", name="diffusers"))
    "this needs diffusers, which is not installed: pip install 'editlens[editors]' (or pip install diffusers)"
    """
    top = (exc.name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    return (f"this needs {top}, which is not installed: pip install 'editlens[{EXTRAS[top]}]' "
            f"(or pip install {top})")


def guarded(fn: Any) -> Any:
    """Turn editlens' own errors into a one-paragraph message and exit code 2; an optional package
    that is missing names the extra that installs it."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ModuleNotFoundError as exc:
            message = missing_extra(exc)
            if message is None:
                raise
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(code=2) from None
        except EditlensError as exc:
            fail(exc)
        except ValueError as exc:
            if type(exc).__module__.startswith("editlens") or type(exc) is ValueError:
                fail(exc)
            raise

    return wrapper
