"""``editlens``: the command line.

Every command group lives in its own module as a Typer app and is mounted
here the same way, from the table :data:`COMMAND_GROUPS` (a group mounted
without a name adds its commands at the top level). Command modules import
only Typer and light editlens modules at import time; the work, and torch,
is imported inside each command.
"""

from __future__ import annotations

import importlib
import logging

import typer

#: (module, Typer app attribute, mount name or None for top-level commands), in --help order.
COMMAND_GROUPS: tuple[tuple[str, str, str | None], ...] = (
    ("editlens.cli.core_commands", "app", None),          # metrics, score, run, compare
    ("editlens.cli.demo_commands", "app", None),          # demo
    ("editlens.cli.models_commands", "app", None),        # models
    ("editlens.cli.report_commands", "app", None),        # report, view
    ("editlens.cli.serve_commands", "app", None),         # serve
    ("editlens.cli.arena_commands", "app", None),         # arena
    ("editlens.cli.trust_commands", "app", None),         # probe, calibrate, edit-types
    ("editlens.cli.adiee_commands", "reward_app", None),  # best-of-n, relabel
    ("editlens.cli.edit_commands", "app", None),          # edit, editors, edit-pairs, make-tiny-editor
    ("editlens.cli.runs_commands", "app", "runs"),
    ("editlens.cli.dice_commands", "app", "dice"),
    ("editlens.cli.adiee_commands", "adiee_app", "adiee"),
    ("editlens.cli.twoframe_commands", "twoframe_app", "twoframe"),
    ("editlens.cli.meta_commands", "meta_app", "meta-eval"),
    ("editlens.cli.bench_commands", "bench_app", "bench"),
    ("editlens.cli.annotate_commands", "annotate_app", "annotate"),
    ("editlens.cli.dice_commands", "legacy_app", None),   # dice-train, dice-rank, ... (hidden aliases)
)


def _version(value: bool) -> None:
    if value:
        from editlens import __version__

        typer.echo(f"editlens {__version__}")
        raise typer.Exit()


#: (logger, part of the message) of dependency warnings that do not apply to editlens: bitsandbytes' optional
#: CPU 4-bit kernel package (its fallback computes the same; editlens records the quantization it used), and
#: transformers' fallback to the PIL image processors (editlens needs no torchvision)
IRRELEVANT_WARNINGS = (
    ("bitsandbytes.backends.cpu.ops", "Failed to load CPU gemm_4bit_forward from kernels-community"),
    ("transformers.utils.import_utils", "requires torchvision (not installed); falling back to"),
)


class _DropIrrelevant(logging.Filter):
    def __init__(self, part: str) -> None:
        super().__init__()
        self.part = part

    def filter(self, record: logging.LogRecord) -> bool:
        return self.part not in record.getMessage()


def quiet_irrelevant_warnings() -> None:
    """Drop the dependency warnings of :data:`IRRELEVANT_WARNINGS` (on their own loggers only: every other
    message of those libraries still shows)."""
    for name, part in IRRELEVANT_WARNINGS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropIrrelevant) for f in logger.filters):
            logger.addFilter(_DropIrrelevant(part))


def _root_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Judge instruction-guided image edits: what changed, where, and how well."""
    quiet_irrelevant_warnings()


def build_app() -> typer.Typer:
    """The ``editlens`` command with every group of :data:`COMMAND_GROUPS` mounted."""
    # plain (click) help: rich tables cut long option names ("--retry-unscor…") at 80 columns
    root = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                       help="Judge instruction-guided image edits: what changed, where, and how well.")
    root.callback(invoke_without_command=True)(_root_options)
    for module, attr, name in COMMAND_GROUPS:
        sub = getattr(importlib.import_module(module), attr)
        if name is None:
            root.add_typer(sub)
        else:
            root.add_typer(sub, name=name)
    return root


app = build_app()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
