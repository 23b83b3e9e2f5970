"""``editlens models``: every known model and checkpoint recipe (the presets),
whether it can load here, and what to do when it cannot."""

from __future__ import annotations

from typing import List, Optional

import typer

from editlens.cli.common import emit_json, guarded, parse_models
from editlens.cli.options import ModelOpt

app = typer.Typer()


@app.command("models")
@guarded
def models_cmd(
    kind: Optional[str] = typer.Option(None, "--kind", help="Only presets of this kind (clip, vlm-family, dice, ...)."),
    model: Optional[List[str]] = ModelOpt,
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List model presets with their kind, availability here and the fix when missing."""
    from editlens.models.registry import KINDS, availability, presets

    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"unknown kind {kind!r}; known: {', '.join(sorted(KINDS))}", param_hint="--kind")
    overrides = parse_models(model)
    rows = []
    for p in sorted(presets().values(), key=lambda p: (p.kind, p.name)):
        if kind is not None and p.kind != kind:
            continue
        ok, reason = availability(p, overrides)
        rows.append({**p.to_dict(), "available": ok, "unavailable_reason": reason})
    if json_out:
        emit_json(rows)
        return
    from editlens.cli.tables import print_table

    print_table("editlens models", ["name", "kind", "role", "available", "description"],
                [[r["name"], r["kind"], r["role"] or "-", "yes" if r["available"] else "no", r["description"]]
                 for r in rows])
    missing = [r for r in rows if not r["available"]]
    for r in missing:
        typer.echo(f"\n{r['name']}: {r['unavailable_reason']}")
