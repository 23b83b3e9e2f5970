"""``editlens meta-eval``: agreement of evaluators with human judgments."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from editlens.cli.meta_commands import meta_app

    app.add_typer(meta_app, name="meta-eval")
