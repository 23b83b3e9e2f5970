"""MMRB2 image editing (``edit.json`` built by the MMRB2 repository's
``benchmark/build_from_hf.py``): ``{"pairs": [...]}`` with ``id``, ``prompt_content``
(``[["text", ...], ["image", "input_images/..."]]``), ``response_a``/``response_b``
(``model_name``, ``response_content``), ``chosen`` (``A``/``B``) and ``human_annotations``.
Protocol (:func:`mmrb2_report`): every pair judged in both orders; accuracy = (forward correct +
flipped reverse correct) / judgements made, with accuracy per order and the consistency of the
two orders."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import HumanLabelBenchmark, MetaReport, evaluated, f, no_options, require
from editlens.bench.labels import (
    Edit,
    LabelledPairs,
    Pair,
    load_results,
    load_verdicts,
    scored_values,
)
from editlens.bench.registry import register
from editlens.core.io import read_json
from editlens.errors import InputError

DOWNLOAD = ("https://github.com/facebookresearch/MMRB2: python benchmark/build_from_hf.py --output-dir DIR "
            "(writes DIR/edit.json and its images)")


def read_mmrb2(path: str | Path, multi_input: str = "skip") -> LabelledPairs:
    """MMRB2's ``edit.json``. Pairs whose prompt holds several input images
    (compositions) are left out unless ``multi_input="first"`` (the first
    image then stands for the source), and counted either way."""
    p = Path(path)
    if p.is_dir():
        p = p / "edit.json"
    data = read_json(p, "MMRB2's edit.json", "build it with MMRB2's benchmark/build_from_hf.py")
    if not isinstance(data, dict) or not isinstance(data.get("pairs"), list):
        raise InputError(f"{p}: expected {{\"pairs\": [...]}}")
    base = p.parent
    edits: dict[str, Edit] = {}
    pairs: list[Pair] = []
    skipped: Counter[str] = Counter()
    for n, pr in enumerate(data["pairs"]):
        where = f"{p} pairs[{n}]"
        if not isinstance(pr, dict) or not pr.get("id"):
            raise InputError(f"{where}: needs an 'id'")
        if "prompt_content" not in pr:
            raise InputError(f"{where}: no 'prompt_content' (this looks like MMRB2's *_response_only.json: build the "
                             "full benchmark with its benchmark/build_from_hf.py)")
        chosen = str(pr.get("chosen") or "").upper()
        if chosen not in ("A", "B"):
            raise InputError(f"{where}: 'chosen' must be A or B, got {pr.get('chosen')!r}")
        text = " ".join(c[1].strip() for c in pr["prompt_content"] if _kind(c, where) == "text" and c[1].strip())
        inputs = [c[1] for c in pr["prompt_content"] if _kind(c, where) == "image"]
        outs = []
        for side in ("a", "b"):
            resp = pr.get(f"response_{side}") or {}
            imgs = [c[1] for c in resp.get("response_content") or [] if _kind(c, where) == "image"]
            outs.append((resp.get("model_name"), imgs))
        if not text:
            skipped["no instruction text"] += 1
            continue
        if len(inputs) != 1 and not (len(inputs) > 1 and multi_input == "first"):
            skipped["no input image" if not inputs else "several input images"] += 1
            continue
        if any(len(imgs) != 1 for _, imgs in outs):
            skipped["a response without exactly one image"] += 1
            continue
        src = _path(inputs[0], base, where)
        ids = []
        for side, (model, imgs) in zip(("a", "b"), outs):
            eid = f"{pr['id']}/{side}"
            edits[eid] = Edit(eid, text, src, _path(imgs[0], base, where), model, str(pr["id"]))
            ids.append(eid)
        pairs.append(Pair(str(pr["id"]), ids[0], ids[1], 1 if chosen == "A" else -1,
                          {"chosen": chosen, "human_annotations": pr.get("human_annotations"),
                           "prompt_source": pr.get("prompt_source"), "inputs": len(inputs)}))
    return LabelledPairs("mmrb2", str(p), edits, pairs, {"pairs_in_file": len(data["pairs"]), "left_out": dict(skipped)})


def _kind(c: Any, where: str) -> str:
    if not (isinstance(c, (list, tuple)) and len(c) == 2 and c[0] in ("text", "image") and isinstance(c[1], str)):
        raise InputError(f"{where}: content items are [\"text\"|\"image\", str], got {c!r}"[:300])
    return c[0]



def _path(rel: str, base: Path, where: str) -> Path:
    q = Path(rel)
    q = q if q.is_absolute() else base / q
    if not q.is_file():
        raise InputError(f"{where}: image {rel!r} not found under {base}")
    return q



def mmrb2_report(bench: LabelledPairs, *, scores: dict[str, float] | None = None,
                 verdicts: dict[str, dict[str, Any]] | None = None, metric: str | None = None) -> dict[str, Any]:
    """MMRB2's protocol. With a point-wise evaluator's ``scores`` both orders
    are the same computation (the forward judgement is A when A scores
    higher; equal scores are a judgement for neither, counted wrong). With a
    pairwise judge's ``verdicts`` (``compare --pairs --orders both``), the
    forward and the (flipped) reverse verdicts are separate judgements; a
    tie verdict is a judgement for neither (wrong); no verdict is no
    judgement (left out, as MMRB2 does)."""
    from editlens.meta.direction import oriented

    if scores is not None:
        scores = oriented(scores, metric)  # the forward judgement is the *better* edit in the evaluator's direction
    fwd = [0, 0]
    rev = [0, 0]
    agree = checked = missing = ties = 0
    combined = [0, 0]
    for pr in bench.pairs:
        if scores is not None:
            if pr.a not in scores or pr.b not in scores:
                missing += 1
                continue
            d = scores[pr.a] - scores[pr.b]
            j = "A" if d > 0 else "B" if d < 0 else None
            ties += j is None
            for tally in (fwd, rev):
                tally[1] += 1
                tally[0] += j == pr.meta["chosen"]
            checked += 1
            agree += 1
            combined[1] += 1
            combined[0] += j == pr.meta["chosen"]
            continue
        v = (verdicts or {}).get(pr.id)
        if v is None:
            missing += 1
            continue
        orders = v.get("orders") or {}
        js = {}
        for name, tally in (("forward", fwd), ("reverse", rev)):
            o = orders.get(name)
            verdict = (o or {}).get("verdict")
            if verdict is None:
                continue
            j = {"A>B": "A", "B>A": "B"}.get(verdict)
            ties += j is None
            js[name] = j
            tally[1] += 1
            tally[0] += j == pr.meta["chosen"]
        if len(js) == 2:
            checked += 1
            agree += js["forward"] == js["reverse"]
        if v.get("verdict") is not None:
            combined[1] += 1
            combined[0] += {"A>B": "A", "B>A": "B"}.get(v["verdict"]) == pr.meta["chosen"]
    judged = fwd[1] + rev[1]
    acc = (fwd[0] + rev[0]) / judged if judged else None
    return {"benchmark": "mmrb2-image-editing", "protocol": "mmrb2: both orders, (forward correct + flipped reverse "
            "correct) / judgements", "metric": metric, "value": acc, "accuracy": acc,
            "accuracy_forward": fwd[0] / fwd[1] if fwd[1] else None,
            "accuracy_reverse": rev[0] / rev[1] if rev[1] else None,
            "consistency": agree / checked if checked else None,
            "accuracy_of_agreed_verdict": combined[0] / combined[1] if combined[1] else None,
            "judgements": judged, "tie_judgements": ties, "n_pairs": len(bench.pairs), "n_missing": missing,
            "orders": "scored independently: the order cannot matter" if scores is not None else "asked both ways",
            "left_out_when_read": bench.info.get("left_out", {})}



def _report(bench: str | Path, predictions: str | Path | None = None, verdicts: str | Path | None = None,
            metric: str | None = None, multi_input: str = "skip") -> dict[str, Any]:
    b = MMRB2().read_pairs(bench, multi_input=multi_input)
    if predictions is not None:
        return mmrb2_report(b, scores=scored_values(load_results(predictions, metric)), metric=metric)
    return mmrb2_report(b, verdicts=load_verdicts(verdicts), metric="pairwise judge")  # type: ignore[arg-type]


@register
class MMRB2(HumanLabelBenchmark):
    spec = BenchSpec(
        name="mmrb2",
        title="MMRB2 image editing",
        homepage="https://github.com/facebookresearch/MMRB2",
        download="git clone https://github.com/facebookresearch/MMRB2 && python MMRB2/benchmark/build_from_hf.py "
                 "--output-dir DIR (writes DIR/edit.json and its images)",
        layout="edit.json {pairs: [{id, prompt_content, response_a, response_b, chosen, human_annotations}]}",
        label_kind="pairwise",
        columns={"prompt_content": "instruction text and input image(s)", "response_a/b": "the two edits",
                 "chosen": "A or B"},
        protocols={"mmrb2": "every pair judged in both orders; accuracy = (forward correct + flipped reverse "
                   "correct) / judgements; per order and their consistency"},
        table_layout={"columns": ["accuracy", "forward", "reverse", "consistency"]},
        usage="editlens meta-eval prepare mmrb2 DIR --out P && editlens run P/manifest.jsonl ... && editlens meta-eval run mmrb2 --data P --predictions RUN/results.jsonl --metric NAME",
        identical="both-orders accuracy over judgements; no verdict is no judgement",
        differs="pairs with several input images are left out (or use the first) and counted",
    )
    protocol_functions = {"mmrb2": _report}
    report_title = "MMRB2 image editing"
    data_help = "MMRB2's edit.json (or its folder), or a folder from `editlens meta-eval prepare mmrb2`"
    predictions_help = "an `editlens run` results.jsonl of the prepared manifest (with --metric); or --verdicts"
    prepare_download = DOWNLOAD

    def read_published(self, path: Path, with_images: bool = False, **options: Any) -> LabelledPairs:
        """``edit.json`` (``multi_input``: ``skip`` or ``first``)."""
        return read_mmrb2(path, **options)

    def labels(self, path: str | Path, **options: Any) -> Any:
        return self.read_pairs(path, **options)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        no_options(self.spec.name, {k: v for k, v in options.items() if k != "multi_input"})
        if (predictions is None) == (verdicts is None):
            raise InputError("give exactly one of --predictions (a point-wise evaluator) or --verdicts (a pairwise judge)")
        rep = _report(data, predictions, verdicts, metric, options.get("multi_input", "skip"))
        require(rep["judgements"], "no pair has a judgement")
        rep["evaluated"] = evaluated(predictions=predictions, metric=metric, verdicts=verdicts, human=data)
        return MetaReport(rep, self.report_title)

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        return [f"MMRB2 image editing: accuracy {f(rep['accuracy'])} over {rep['judgements']} judgements "
                f"(forward {f(rep['accuracy_forward'])}, reverse {f(rep['accuracy_reverse'])}), consistency "
                f"{f(rep['consistency'])}; {rep['n_missing']} of {rep['n_pairs']} pairs without a judgement"]
