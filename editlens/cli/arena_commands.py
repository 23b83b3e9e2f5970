"""``editlens arena``: rank editors from pairwise verdicts (Bradley-Terry)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, List, Optional

import typer

from editlens.cli.common import EXIT_FAILED, emit_json, guarded, parse_models, split_names
from editlens.cli.options import (
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    OptionOpt,
    ShardOpt,
    bundles,
    judge_bundle,
)

app = typer.Typer(no_args_is_help=True)


class Ties(str, enum.Enum):
    davidson = "davidson"
    half = "half"


class Orders(str, enum.Enum):
    both = "both"
    forward = "forward"
    reverse = "reverse"


class Scale(str, enum.Enum):
    bt = "bt"
    elo = "elo"


@app.command("arena")
@guarded
@bundles
def arena_cmd(
    run_or_manifest: Optional[Path] = typer.Argument(None, help="A run directory (its manifest) or a manifest with "
                                                     "several editors (the 'model' column) per source."),
    judge: Optional[str] = typer.Option(None, "--judge", help="A pairwise judge (an evaluator that compares two edits, "
                                        "e.g. pairwise; needs --vlm). Asked in both orders unless --orders says otherwise."),
    metric: Optional[str] = typer.Option(None, "--metric", help="Decide each pair by a point-wise evaluator's scores "
                                         "(its spec says which direction is better); a run's stored scores are reused."),
    orders: Orders = typer.Option(Orders.both, "--orders", help="Pairwise judge: both (a verdict that follows the position "
                               "becomes a tie), forward or reverse."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder of arena.json, comparisons.jsonl and the verdict "
                                       "cache (default: RUN/arena, or arena-<manifest name> beside a manifest)."),
    ties: Ties = typer.Option(Ties.davidson, "--ties", help="How ties enter Bradley-Terry: davidson (a fitted tie "
                              "parameter) or half (half a win each)."),
    scale: Scale = typer.Option(Scale.bt, "--scale", help="Ratings shown as bt (log-strength, centred on 0) or elo "
                                "(1000 + 400 * rating / ln 10). The JSON holds both."),
    budget: Optional[int] = typer.Option(None, "--budget", min=1, help="At most this many comparisons (pairs judged; "
                                         "both orders of a pair count once). Default: until every order is settled."),
    round_size: Optional[int] = typer.Option(None, "--round-size", min=1, help="Comparisons per adaptive round "
                                             "(default: max(editors, sources / 2))."),
    stop_at: float = typer.Option(0.01, "--stop-at", help="A pair is settled when the probability of its order "
                                  "being wrong is below this; pairs above it are compared next."),
    editors: Optional[str] = typer.Option(None, "--editors", help="Comma-separated editors to compare (default: all)."),
    human_ranking: Optional[Path] = typer.Option(None, "--human-ranking", help="JSON {editor: score} (higher = better) "
                                                 "or a list of editors, best first: Kendall τ and Spearman ρ of the "
                                                 "arena's ranking against it."),
    n_boot: int = typer.Option(200, "--n-boot", min=10, help="Bootstrap resamples of the sources for the CIs."),
    seed: int = typer.Option(0, "--seed", help="Seed of the schedule and the bootstrap."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Pairs per judge batch."),
    json_out: bool = typer.Option(False, "--json", help="Print the arena document (also written to OUT/arena.json)."),
    human_votes: Optional[Path] = typer.Option(None, "--human-votes", help="Rank the editors from people's pairwise "
                                               "votes instead (an `editlens annotate` folder; OUT defaults to "
                                               "DIR/arena): the same Bradley-Terry fit and CIs, no judge."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    judging: Any = judge_bundle(vlms=True),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    shard: Optional[str] = ShardOpt,
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N sources (a quick look)."),
) -> None:
    """Rank the editors of a run by pairwise comparisons on the sources they all edited: Bradley-Terry
    ratings (ties kept) with bootstrap CIs over sources, pairs chosen adaptively (uncertain neighbours
    first). Resumable: a rerun with the same settings reuses every verdict already made.

    Exit status: 0 done; 2 bad input; 3 some comparisons were lost to the backend (rerun to ask them again),
    or no comparison gave a verdict (nothing is rated).
    """
    from editlens.errors import InputError
    from editlens.runner import arena as A
    from editlens.runner.selection import parse_options

    if human_votes is not None:
        if judge or metric or run_or_manifest is not None:
            raise typer.BadParameter("--human-votes ranks from people's votes: no RUN_OR_MANIFEST, --judge or --metric")
        from editlens.annotate.export import people_arena
        from editlens.runner.arena import read_human_ranking

        doc = people_arena(human_votes, out, ties=ties.value, n_boot=n_boot, seed=seed,
                           human=read_human_ranking(human_ranking) if human_ranking else None)
        _say_arena(doc, out or human_votes / "arena", scale.value, json_out)
        return
    if run_or_manifest is None:
        raise typer.BadParameter("give RUN_OR_MANIFEST (or --human-votes DIR)")
    if bool(judge) == bool(metric):
        raise typer.BadParameter("give one of --judge NAME (a pairwise judge, with --vlm) or --metric NAME "
                                 "(pairs decided by a point-wise evaluator's scores)")
    contests, info = A.contests_from(run_or_manifest, split_names(editors))
    from editlens.runner.shards import parse_shard

    part = parse_shard(shard)
    every = contests
    if part is not None:  # this shard's sources; `runs merge` fits the ratings over every shard's verdicts
        contests = part.select(contests, lambda c: c.key)
        if not contests:
            raise InputError(f"--shard {shard}: none of the {len(every)} sources falls in this shard; use fewer shards")
    if limit is not None:
        contests = contests[:limit]
    human = A.read_human_ranking(human_ranking) if human_ranking else None
    comparer = _arena_comparer(judge, metric, judging, orders.value, parse_options(option or []),
                               parse_models(model), contests, info)
    from editlens.backends.scripted_judge import WARNING, scripted_in

    backend = getattr(getattr(comparer, "judge", None) or getattr(comparer, "metric", None), "backend", None)
    if backend is not None and scripted_in(backend.describe()):  # said first, kept in arena.json's notes
        info["notes"] = [WARNING, *info["notes"]]
        typer.echo(f"warning: {WARNING}", err=True)
    if out is None:
        out = Path(info["run"]) / "arena" if info["run"] else Path(info["manifest"]).parent / f"arena-{Path(info['manifest']).stem}"
    doc = A.run_arena(contests, comparer, out, ties=ties.value, budget=budget, round_size=round_size, stop_at=stop_at,
                      seed=seed, n_boot=n_boot, batch_size=batch_size, human=human,
                      info={"manifest": Path(info["manifest"]).name, "run": Path(info["run"]).name if info["run"] else None,
                            "notes": info["notes"], "noop": info["noop"]},
                      progress=lambda line: typer.echo(line, err=True))
    if part is not None:
        from editlens.core.io import write_json
        from editlens.runner.shards import ids_digest, shard_record

        write_json(out / "shard.json", shard_record(
            part, [c.key for c in every], ids_digest([(c.key, *sorted(c.edits.items())) for c in every]), "arena",
            editors=sorted({m for c in every for m in c.edits}), n_boot=n_boot), default=str)
    _say_arena(doc, out, scale.value, json_out)
    if doc["verdicts"]["failed"]:
        raise typer.Exit(EXIT_FAILED)
    if not doc["verdicts"]["decided"] and not doc["verdicts"]["ties"]:  # nothing rated: never a success
        typer.echo("error: no comparison gave a verdict (every answer unparsable or missing; see "
                   f"{out / 'comparisons.jsonl'}): nothing is rated", err=True)
        raise typer.Exit(EXIT_FAILED)


def _arena_comparer(judge: str | None, metric: str | None, settings: Any, orders: str,
                    opts: dict[str, dict[str, Any]], models: dict[str, str], contests: list[Any],
                    info: dict[str, Any]) -> Any:
    """What decides a pair: a pairwise judge (``--judge``, with the judge settings), or a point-wise
    evaluator's scores (``--metric``; stored in the run already, else computed)."""
    from editlens.errors import InputError
    from editlens.metrics.registry import get_spec
    from editlens.metrics.spec import RANKED_MEASURES
    from editlens.runner import arena as A
    from editlens.runner.compare import JudgeComparer, ScoreComparer

    if judge:
        if not get_spec(judge).pairwise:
            raise InputError(f"--judge {judge}: not a pairwise judge (it scores one edit); use --metric {judge}")
        if not settings.vlm:
            raise typer.BadParameter(f"the {judge} judge needs --vlm")
        return JudgeComparer({**(settings.vlm_options() or {}), "orders": orders, **opts.get(judge, {})}, judge)
    assert metric is not None
    spec = get_spec(metric)
    if spec.pairwise:
        raise InputError(f"--metric {metric}: a pairwise judge; use --judge {metric}")
    if spec.measures not in RANKED_MEASURES:
        what = ("measures similarity to the source: an editor that changes nothing would win every pair"
                if spec.measures == "similarity" else "gives no score of the edit")
        raise InputError(f"--metric {metric} {what}. An arena needs an evaluator that judges the edit (edit quality, "
                         "instruction following or agreement with a reference), or a pairwise judge (--judge).")
    if info["run"]:
        ids = {(c.source, path, c.instruction): c.ids[m] for c in contests for m, path in c.edits.items()}
        stored = A.StoredScoreComparer(Path(info["run"]), metric, ids)
        if stored.config is not None:
            return stored
    from dataclasses import replace

    # as before JudgeSettings: point-wise scores take the judge block less --min-samples
    return ScoreComparer(metric, models, opts, settings.device, settings.dtype,
                         replace(settings, min_samples=None).vlm_options())


def _say_arena(doc: dict[str, Any], out: Path, scale: str, json_out: bool) -> None:
    if json_out:
        emit_json(doc)
        return
    for line in arena_lines(doc, scale):
        typer.echo(line)
    typer.echo(f"-> {out / 'arena.json'}", err=True)


def arena_lines(doc: dict, scale: str = "bt") -> list[str]:
    """How an arena's ranking reads on a terminal."""
    key, ci_key, fmt = ("elo", "elo_ci", "{:.0f}") if scale == "elo" else ("rating", "ci", "{:+.3f}")
    s = doc["schedule"]
    v = doc["verdicts"]
    lines = [f"arena of {len(doc['editors'])} editors on {doc['sources']} sources, judged by {doc['judge']}: "
             f"{s['comparisons']} of {s['all_pairs']} possible comparisons ({s['stopped']}; {s['asked']} asked, "
             f"{s['cached']} from the cache)",
             f"verdicts: {v['decided']} decided, {v['ties']} {'tie' if v['ties'] == 1 else 'ties'} "
             f"({v['position_bias']} from position bias), "
             f"{v['no_verdict']} without a verdict ({v['failed']} failed)",
             f"Bradley-Terry, {doc['ties_model']}" + (f"; nu = {doc['tie_parameter']:.3f}" if doc.get("tie_parameter")
                                                      else " (here not fitted: see the notes)"
                                                      if doc.get("ties") == "davidson" else ""),
             f"{'rating' if scale == 'bt' else 'Elo'} with {doc['ci']}", ""]
    several = len(doc.get("groups") or []) > 1
    rows = [["#", "editor"] + (["group"] if several else []) + ["rating" if scale == "bt" else "Elo", "95% CI",
                                                              "rank CI", "W-L-T", "vs next"]]
    nxt = {n["better"]: n for n in doc["neighbours"]}
    unordered = not v.get("decided")  # every verdict a tie (or none): nothing orders the editors, no #1 shown
    for r in doc["editors"]:
        n = nxt.get(r["editor"])
        vs = "" if n is None else (f"? {n['worse']} (too few sources to say)" if n["p_better"] is None else
                                  f"{'>' if n['significant'] else '≈'} {n['worse']} "
                                  f"(better in {n['p_better']:.0%} of resamples)")
        if unordered:
            r = {**r, "rank": None, "rank_ci": None}
            vs = ""
        note = r.get("rating_note")
        # what the verdicts cannot support is said, not given a number
        value = (fmt.format(r[key]) if r.get(key) is not None else
                 "separated" if note and "separation" in note else "–")
        ci = ("[" + ", ".join(fmt.format(x) for x in r[ci_key]) + "]" if r.get(ci_key) else
              "too few sources" if note and "too few" in note else "–")
        rows.append(["–" if r["rank"] is None else str(r["rank"]),
                     r["editor"] + (f" [no-op: {r['noop']}]" if r.get("noop") and r["rank"] is None else "")]
                    + ([str(r.get("group") or "–")] if several else [])
                    + [value, ci, "–" if r["rank_ci"] is None else f"{r['rank_ci'][0]}-{r['rank_ci'][1]}",
                       f"{r['wins']}-{r['losses']}-{r['ties']}", vs])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if unordered:
        lines.append("not ranked: no comparison was decided (every verdict a tie or none), so no editor is #1")
    for note in doc.get("notes") or []:
        lines.append(f"note: {note}")
    s_un = s.get("unsettled") or []
    if s["stopped"] != "settled" and s_un:
        lines.append("not settled: " + "; ".join(f"{u['better']} and {u['worse']} (unconnected groups: no order)"
                                                 if u.get("unlinked") else
                                                 f"{u['better']} above {u['worse']} (wrong-order probability "
                                                 f"{u['p_wrong']:.2f})" for u in s_un)
                     + f", over the --stop-at {s['stop_at']:g}")
    h = doc.get("human")
    if h:
        f = lambda x: "undefined" if x is None else f"{x:.3f}"  # noqa: E731
        lines.append(f"agreement with the human ranking over {h['n']} editors: Kendall τ {f(h['kendall'])}, "
                     f"Spearman ρ {f(h['spearman'])}" + (f" ({h['why']})" if h.get("why") else ""))
        if h.get("not_in_arena"):
            lines.append(f"the human ranking names editors not in the arena (left out): {', '.join(h['not_in_arena'])}")
    return lines
