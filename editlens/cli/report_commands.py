"""``editlens report`` and ``editlens view``: the HTML report of a run."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from editlens.cli.common import guarded
from editlens.cli.options import ReportImages

app = typer.Typer()

ManifestOpt = typer.Option(None, "--manifest", help="The run's manifest, when it moved since the run "
                           "(default: the path the run recorded).")
HumanOpt = typer.Option(None, "--human", help="JSONL {id, human}: human scores to correlate with "
                        "(a manifest column 'human' is used too).")
ThumbOpt = typer.Option(None, "--thumb-size", min=16, max=2048, help="Longest side of the thumbnails as shown, in CSS "
                        "pixels; they are made at twice that for sharp 2x screens (default 240, or 160 above 300 edits).")


@app.command("report")
@guarded
def report_cmd(
    run_dir: Path = typer.Argument(..., help="Run directory (from `editlens run`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)."),
    manifest: Optional[Path] = ManifestOpt,
    human: Optional[Path] = HumanOpt,
    thumb_size: Optional[int] = ThumbOpt,
    meta_eval: Optional[List[Path]] = typer.Option(None, "--meta-eval", help="A saved `editlens meta-eval ... --json` "
                                                   "result to include. Repeatable."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap CIs."),
    images: ReportImages = typer.Option("auto", "--images", help="Full-size images for the inspector: embed (in the file), copy "
                               "(into OUT's folder as <name>_images/, linked relatively: move both together), link "
                               "(relative links to the originals, '../' included: this machine only), none (thumbnails "
                               "only), or auto (embed up to 32 MB in all, else copy). Only link writes local paths."),
    by: Optional[str] = typer.Option(None, "--by", help="Manifest column whose values group the leaderboards "
                                     "(default edit_type; e.g. task_type, instruction_language, model)."),
) -> None:
    """Write a self-contained HTML report of a run: leaderboard, editor comparison, images with boxes, verdicts,
    scores, tables, plots."""
    from editlens.reporting.html import write_run_report

    path = write_run_report(run_dir, out, manifest=manifest, human=human, meta_eval=meta_eval or [],
                            thumb_size=thumb_size, seed=seed, images=images, by=by)
    copied = path.parent / f"{path.stem}_images"
    also = f"; full-size images in {copied}/ (keep it beside the report)" if images in ("auto", "copy") and copied.is_dir() else ""
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB){also}; open it in a browser")


@app.command("view")
@guarded
def view_cmd(
    run_dir: Path = typer.Argument(..., help="Run directory (from `editlens run`)."),
    port: int = typer.Option(0, "--port", help="Port on 127.0.0.1 (default: any free port)."),
    manifest: Optional[Path] = ManifestOpt,
    human: Optional[Path] = HumanOpt,
    thumb_size: Optional[int] = ThumbOpt,
    open_browser: bool = typer.Option(False, "--open", help="Also open it in the default browser."),
    token: bool = typer.Option(False, "--token", help="Require a random token in every request (the printed URL "
                               "carries it): for machines other people log in to."),
    by: Optional[str] = typer.Option(None, "--by", help="Manifest column whose values group the leaderboards "
                                     "(default edit_type)."),
) -> None:
    """Serve a run's report on 127.0.0.1 (this machine only) and print its URL; Ctrl-C stops.

    The report is rebuilt when the run's results change: refresh the page to follow a run in progress.
    """
    import secrets

    from editlens.reporting.serve import ReportServer

    server = ReportServer(run_dir, port=port, manifest=manifest, human=human, thumb_size=thumb_size, by=by,
                          token=secrets.token_urlsafe(24) if token else None)
    typer.echo(f"serving the report of {run_dir} at {server.url}  (Ctrl-C to stop)", err=False)
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
