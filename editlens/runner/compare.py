"""``editlens compare``: which of two edits of one source is better, decided
by the pairwise VLM judge (:mod:`editlens.judges.pairwise`, both
presentation orders by default) or by a point-wise evaluator's scores
(EditScore, EditReward, ADIEE, CLIP-D...), for one pair or a file of them.

Every verdict is a dict: ``{"id", "verdict", "label", "reason", ...}``;
verdicts are ``A>B``, ``B>A``, ``A=B`` (a tie; from the judge also
``A=B=Good``/``A=B=Bad``) or ``None`` (no verdict, the reason says why).
From a judge asked both ways they also hold ``orders`` (each order's
verdict and raw answer) and ``consistent``; from scores, ``score_a``,
``score_b`` and, for EditReward, ``p_a_better`` under the model's own
uncertainty. Scores are compared as they are: equal scores are a tie.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.errors import InputError

_LABEL = {"A>B": 1, "B>A": -1, "A=B": 0, "A=B=Good": 0, "A=B=Bad": 0}


@dataclass(frozen=True)
class PairItem:
    """One pair; images are file paths or cells of a table (:class:`~editlens.core.embedded.TableImage`)."""

    id: str
    source: Any
    edited_a: Any
    edited_b: Any
    instruction: str
    reference: Any = None  # the reference edit of the source, for evaluators that need one (l1_ref, ssim_ref...)


PAIR_COLUMNS = ("id", "source", "edited_a", "edited_b", "instruction")


def read_pairs(path: Path, columns: str | Mapping[str, str] | None = None) -> list[PairItem]:
    """``{id, source, edited_a, edited_b, instruction}`` rows of a JSONL file, or of any format
    :func:`editlens.data.tables.read_rows` reads (parquet/arrow with embedded images, ``datasets``
    folders, JSON); ``columns`` maps the file's names (``edited_a=output_images[0]``). Relative
    image paths are relative to the file."""
    from editlens.core.embedded import TableImage, parse_ref
    from editlens.data.manifest import parse_columns, rename_columns
    from editlens.data.tables import read_rows

    mapping = parse_columns(columns, PAIR_COLUMNS)
    read = read_rows(path)
    out, seen = [], set()
    for r in read.rows:
        where = f"{path}:{r.pos}" if read.unit == "line" else r.where
        if r.error is not None:
            raise InputError(f"{where}: {r.error}")
        try:
            row = rename_columns(dict(r.values or {}), mapping)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        missing = [k for k in ("source", "edited_a", "edited_b", "instruction") if not row.get(k)]
        if missing:
            theirs = sorted(set(row) - set(PAIR_COLUMNS))
            hint = f" (its columns: {', '.join(theirs)}; map them with --columns)" if theirs else ""
            raise InputError(f"{where}: a pair needs {', '.join(missing)}{hint}")
        pid = str(row.get("id", r.pos))
        if pid in seen:
            raise InputError(f"{where}: pair id {pid!r} appears twice")
        seen.add(pid)
        base = r.base or Path(path).parent
        images: list[Any] = []
        for k in ("source", "edited_a", "edited_b"):
            value = row[k]
            ref = parse_ref(value)
            if isinstance(value, list):
                raise InputError(f"{where}: {k} holds a list of {len(value)} image(s); pick one with "
                                 f"--columns {k}=COLUMN[0]")
            if ref is not None:
                images.append(ref if Path(ref.file).is_absolute() else TableImage(
                    str(base / ref.file), ref.row, ref.column, ref.index))
            else:
                images.append(str(Path(value) if Path(value).is_absolute() else base / value))
        out.append(PairItem(pid, images[0], images[1], images[2], str(row["instruction"]).strip()))
    if not out:
        raise InputError(f"{path}: no pairs")
    return out


class JudgeComparer:
    """Pairs decided by a pairwise VLM judge (``judge``: a registered evaluator whose spec declares
    ``orders``; ``options`` as for ``PairwiseJudge``)."""

    def __init__(self, options: Mapping[str, Any], judge: str = "pairwise") -> None:
        from editlens.metrics.registry import create_metric

        made: Any = create_metric(judge, **dict(options))  # a PairwiseJudge
        self.judge = made
        self.name = f"{judge} ({made.orders})"

    def compare(self, items: Sequence[PairItem], batch_size: int = 8) -> list[dict[str, Any]]:
        out = []
        for k in range(0, len(items), batch_size):
            chunk = items[k : k + batch_size]
            verdicts = self.judge.compare([(image_ref(it.source), image_ref(it.edited_a), image_ref(it.edited_b),
                                            it.instruction) for it in chunk])
            for it, v in zip(chunk, verdicts):
                out.append({"id": it.id, "label": v.label, **v.to_dict(), "failed": v.failed})
        return out


def image_ref(value: Any) -> Any:
    """An image as a manifest's text names it: a table cell's ``FILE#row=N&column=C`` reference becomes
    the cell (:class:`~editlens.core.embedded.TableImage`, as ``run`` reads it), a path stays a path."""
    from editlens.core.embedded import parse_ref

    return parse_ref(value) or value


class ScoreComparer:
    """Pairs decided by a point-wise evaluator: each distinct edit scored once (batched, cached)."""

    def __init__(self, metric: str, models: dict[str, str], options: Mapping[str, Mapping[str, Any]], device: str,
                 dtype: str, vlm: Mapping[str, Any] | None = None) -> None:
        from editlens.runner.selection import select_metrics

        self.metric = select_metrics([metric], models=models, options=options, device=device, dtype=dtype,
                                     vlm=vlm).metrics[0]
        self.name = self.metric.name

    def compare(self, items: Sequence[PairItem], batch_size: int = 8) -> list[dict[str, Any]]:
        from editlens.core.types import EditSample

        edits: dict[tuple[Any, Any, str, Any], int] = {}
        for it in items:
            for e in (it.edited_a, it.edited_b):
                edits.setdefault((it.source, e, it.instruction, it.reference), len(edits))
        keys = list(edits)
        scores = []
        for k in range(0, len(keys), batch_size):
            loaded = [EditSample(f"e{k + i}", image_ref(s), image_ref(e), ins,
                                 reference=None if r is None else image_ref(r)).load()
                      for i, (s, e, ins, r) in enumerate(keys[k : k + batch_size])]
            scores += self.metric.score_batch(loaded)
        hib = self.metric.spec.higher_is_better
        out = []
        for it in items:
            sa = scores[edits[(it.source, it.edited_a, it.instruction, it.reference)]]
            sb = scores[edits[(it.source, it.edited_b, it.instruction, it.reference)]]
            out.append({"id": it.id, **decide(sa, sb, hib, self.metric.name, self.metric.spec)})
        return out


def decide(sa: Any, sb: Any, higher_is_better: bool, name: str, spec: Any = None) -> dict[str, Any]:
    """A verdict from two Scores (``None`` when either has no value); with the evaluator's ``spec``, its
    sub-scores side by side and its own P(A better) where it declares one."""
    row: dict[str, Any] = {"metric": name, "score_a": sa.value, "score_b": sb.value}
    if sa.value is None or sb.value is None:
        bad = [f"{k}: {s.status} ({s.reason})" for k, s in (("A", sa), ("B", sb)) if s.value is None]
        return {**row, "verdict": None, "label": None, "reason": "; ".join(bad)}
    d = (sa.value - sb.value) * (1 if higher_is_better else -1)
    verdict = "A>B" if d > 0 else "B>A" if d < 0 else "A=B"
    row.update({"verdict": verdict, "label": _LABEL[verdict], "reason": None})
    if spec is None:
        return row
    prefer = spec.load_preference()
    p = prefer(sa, sb) if prefer is not None else None
    if p is not None:
        row["p_a_better"] = p
    da, db = sa.details or {}, sb.details or {}
    for key in spec.sub_scores:
        if key in da and key in db:
            row.setdefault("sub_scores", {})[key] = [da[key], db[key]]
    return row


def summary(verdicts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of verdicts and, for judges asked both ways, the run's consistency rate."""
    from collections import Counter

    counts = Counter(v.get("verdict") or "no verdict" for v in verdicts)
    checked = [v for v in verdicts if v.get("consistent") is not None]
    agree = sum(1 for v in checked if v["consistent"])
    return {"pairs": len(verdicts), "verdicts": dict(counts), "failed": sum(1 for v in verdicts if v.get("failed")),
            "consistency": agree / len(checked) if checked else None, "checked_pairs": len(checked),
            "position_bias": len(checked) - agree}


def single_lines(v: Mapping[str, Any]) -> list[str]:
    """How one pair's verdict reads on a terminal."""
    lines = [f"verdict: unscored ({v.get('reason')})" if v.get("verdict") is None else
             f"verdict: {v['verdict']}" + (f" ({v['reason']})" if v.get("reason") else "")]
    if "score_a" in v:
        extra = f", P(A better) {v['p_a_better']:.3f}" if v.get("p_a_better") is not None else ""
        fmt = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
        lines.append(f"{v['metric']}: A {fmt(v['score_a'])}, B {fmt(v['score_b'])}{extra}")
    orders = v.get("orders") or {}
    if orders:
        lines.append("orders: " + ", ".join(f"{k} {o.get('verdict') or 'no verdict'}" for k, o in orders.items())
                     + ("; consistent" if v.get("consistent") else "; position bias" if v.get("consistent") is False else ""))
    if v.get("ensemble"):
        e = v["ensemble"]
        lines.append(f"{e['samples']} sampled answers, agreement {e['agreement']}, {e['unscored_samples']} without a verdict")
    elif v.get("raw") and not orders:
        lines.append(str(v["raw"]))
    return lines


def summary_line(s: Mapping[str, Any], out: Path | None) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items()))
    line = f"{s['pairs']} pairs: {counts}"
    if s["consistency"] is not None:
        line += (f"; consistency of the two orders {s['consistency']:.3f} over {s['checked_pairs']} pairs "
                 f"({s['position_bias']} decided by position, reported as ties)")
    return line + (f" -> {out}" if out else "")


def write_outputs(verdicts: Sequence[Mapping[str, Any]], out: Path | None, mmrb2_out: Path | None, name: str) -> None:
    from editlens.core.io import atomic_write

    if out:
        atomic_write(out, lambda fh: fh.writelines(json.dumps(v, default=str) + "\n" for v in verdicts))
    if mmrb2_out:
        atomic_write(mmrb2_out, lambda fh: json.dump(mmrb2_judgements(verdicts, name), fh, indent=1, default=str))


def mmrb2_judgements(verdicts: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """Verdicts in MMRB2's judgement format: per pair id, a ``forward``
    judgement (A/B as shown) and a ``reverse`` one in the swapped
    presentation (MMRB2 flips it back when scoring). A tie is ``"tie"``
    (a judgement for neither); no verdict is no entry."""
    from editlens.judges.pairwise import flip

    def judgement(v: str | None) -> str | None:
        return {"A>B": "A", "B>A": "B"}.get(v or "", "tie" if v else None)

    out: dict[str, Any] = {}
    for v in verdicts:
        orders = v.get("orders") or {"forward": {"verdict": v.get("verdict")}, "reverse": {"verdict": v.get("verdict")}}
        entry = {}
        for order in ("forward", "reverse"):
            verdict = (orders.get(order) or {}).get("verdict")
            if order == "reverse":
                verdict = flip(verdict)  # back to the swapped presentation
            j = judgement(verdict)
            if j is not None:
                entry[order] = [{"judgement": j, "evaluator": name, "metadata": {}}]
        out[str(v["id"])] = entry
    return out
