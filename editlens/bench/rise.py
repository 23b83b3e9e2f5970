"""RISEBench (reasoning-informed visual editing): temporal, causal, spatial
and logical reasoning.

Each case is judged on Instruction Reasoning, Appearance Consistency (not
for cases marked ``consistency_free``) and Visual Plausibility (not for
logical cases), 1-5; logical cases are judged right/wrong (0/1, mapped to 1
or 5 as the release does). Protocol: **accuracy** = the share of cases
with full marks (5) on every dimension that applies to them; beside it the
release's weighted score (0.3 AC + 0.5 R + 0.2 VP; 0.2 VP + 0.8 R when
consistency-free; 0.3 AC + 0.7 R for logical; halved, at least 1, when R is
1) and its 0-100 form 25 x (score - 1).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, Question, one_of
from editlens.bench.published import find_file
from editlens.bench.registry import register
from editlens.bench.table import counts, section
from editlens.errors import InputError

CATEGORIES = ("temporal_reasoning", "causal_reasoning", "spatial_reasoning", "logical_reasoning")
_FINAL = re.compile(r"\**\s*Final Scores?\s*\**\s*:?\s*\**\s*([\d\s,*]+)", re.I)


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and v != ""


def rise_item(category: str, dims: Mapping[str, float], consistency_free: bool) -> dict[str, float]:
    """Full marks (1/0) on every applicable dimension, and the release's weighted score.

    >>> rise_item("causal_reasoning", {"R": 5, "AC": 5, "VP": 5}, False)["accuracy"]
    1.0
    >>> rise_item("causal_reasoning", {"R": 5, "VP": 5}, True)["accuracy"]  # consistency does not apply
    1.0
    >>> rise_item("causal_reasoning", {"R": 5, "AC": 4, "VP": 5}, False)["accuracy"]
    0.0
    """
    full = all(v == 5 for v in dims.values())
    r = dims["R"]
    if category == "logical_reasoning":
        score = 0.3 * dims["AC"] + 0.7 * r
    elif consistency_free:
        score = 0.2 * dims["VP"] + 0.8 * r
    else:
        score = 0.3 * dims["AC"] + 0.5 * r + 0.2 * dims["VP"]
    if r == 1:
        score = max(score * 0.5, 1.0)
    return {"accuracy": float(full), "score": score, "score_100": 25.0 * (score - 1.0), **dims}


@register
class RiseBench(Benchmark):
    spec = BenchSpec(
        name="rise",
        title="RISEBench",
        homepage="https://github.com/PhoenixZ810/RISEBench",
        download="hf download PhoenixZ/RISEBench --repo-type dataset --local-dir RISEBench && "
                 "unzip RISEBench/data.zip -d RISEBench (data_total.json and the input images)",
        layout="data_total.json: a list of {index, category, subtask, instruction, image, reference?, "
               "reference_img?, reference_txt?, reasoning_img?, consistency_free?} with image paths relative to it",
        columns={"index": "item id (names the output file)", "category": "category (4)", "subtask": "subtask",
                 "instruction": "instruction", "image": "source", "reference": "expected outcome (text)",
                 "reference_img": "expected outcome (image)", "reference_txt": "answer (logical)",
                 "consistency_free": "appearance consistency does not apply"},
        categories=CATEGORIES, languages=("en",),
        protocols={"rise": "accuracy = share of cases with full marks on every applicable dimension; weighted score "
                   "and 25x(score-1) beside it"},
        table_layout={"sections": ["RISEBench"], "rows": list(CATEGORIES) + ["overall"],
                      "columns": ["accuracy", "score_100", "R", "AC", "VP"], "rank_by": {"figure": "accuracy"}},
        outputs="DIR/<model>/images/<category>/<index>.png (the release's outputs/<model>/ layout) or .jpg",
        dimensions={"R": "instruction reasoning, 1-5 (logical: right/wrong)",
                    "AC": "appearance consistency, 1-5 (logical: right/wrong); not for consistency-free cases",
                    "VP": "visual plausibility, 1-5; not for logical cases"},
        prompts_in_clone="utils.py (prompt_consist, prompt_reasoning, prompt_generation, prompt_spatial_*, "
                         "prompt_logical_*)",
        identical="layout, which dimensions apply to which case, full marks on each for accuracy, the weighted "
                  "score and its 25x(s-1) form, the 0/1 -> 1/5 mapping of logical cases, 'Final Score' answers "
                  "with --prompts-from",
        differs="consistency-free cases can reach full marks (the release's completion check compares their "
                "missing consistency with 5 and so never counts them; 'accuracy_as_released' reproduces that); an "
                "unreadable answer is missing and counted, not an incomplete case",
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        from editlens.data.tables import read_rows

        f = find_file(Path(path), "data_total.json", "RISEBench's data file")
        items = []
        for r in read_rows(f).rows:
            e, where = r.values, r.where
            if e is None:
                raise InputError(f"{where}: {r.error}")
            if not _present(e.get("index")):
                raise InputError(f"{where}: a case needs an 'index'")
            cat = one_of(e.get("category"), CATEGORIES, where, "category")
            img = e.get("image")
            if not isinstance(img, str) or not (f.parent / img).is_file():
                raise InputError(f"{where}: input image {img!r} not found under {f.parent}")
            ref_img = e.get("reference_img")
            ref = f.parent / ref_img if isinstance(ref_img, str) and ref_img else None
            if ref is not None and not ref.is_file():
                raise InputError(f"{where}: reference image {ref_img!r} not found under {f.parent}")
            extra = {k: v for k, v in e.items() if k not in ("image", "instruction", "category", "index")
                     and isinstance(v, (str, int, float, bool, type(None)))}
            extra["consistency_free"] = bool(_present(e.get("consistency_free")) and e.get("consistency_free"))
            items.append(BenchItem(f"{cat}/{e['index']}", str(e["index"]), str(e.get("instruction") or "").strip(),
                                   f.parent / img, cat, "en", reference=ref, extra=extra))
            if not items[-1].instruction:
                raise InputError(f"{where}: empty instruction")
        return items

    def output_candidates(self, item: BenchItem) -> list[str]:
        return [f"images/{item.category}/{item.key}.{e}" for e in ("png", "jpg", "jpeg")] + super().output_candidates(item)

    def prompt_names(self) -> list[str]:
        return ["consistency", "reasoning", "plausibility", "logical_consistency", "logical_reasoning"]

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        from editlens.templates.clones import find_module, module_strings

        f = find_module(clone, ["utils.py"], "--prompts-from", "RISEBench")
        s = module_strings(f, "--prompts-from")
        names = {"consistency": "prompt_consist", "reasoning": "prompt_reasoning", "plausibility": "prompt_generation",
                 "logical_consistency": "prompt_logical_cons_ans", "logical_reasoning": "prompt_logical_txt"}
        out = {k: s[v] for k, v in names.items() if v in s}
        out.update({f"raw:{k}": v for k, v in s.items() if k.startswith("prompt_")})
        return out

    def fallback_prompts(self) -> dict[str, str]:
        from editlens.judges.templates import load_template

        return {n: load_template(f"bench_rise_{n}").text for n in self.prompt_names()}

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        ref_text = str(item.extra.get("reference") or item.extra.get("reference_txt") or "")
        free = bool(item.extra.get("consistency_free"))
        if prompts.from_clone:
            return self._clone_questions(item, prompts, ref_text, free)
        logical = item.category == "logical_reasoning"
        fill = lambda n: prompts.fill(n, instruction=item.instruction, reference=ref_text)  # noqa: E731
        qs = []
        if not free:
            qs.append(Question("consistency", fill("logical_consistency" if logical else "consistency"),
                               ("source", "edited"), ("AC",), low=0 if logical else 1, high=1 if logical else 5))
        qs.append(Question("reasoning", fill("logical_reasoning" if logical else "reasoning"),
                           ("source", "edited"), ("R",), low=0 if logical else 1, high=1 if logical else 5))
        if not logical:
            qs.append(Question("plausibility", fill("plausibility"), ("edited",), ("VP",)))
        return qs

    def _clone_questions(self, item: BenchItem, prompts: Any, ref_text: str, free: bool) -> list[Question]:
        """The release's choice of prompt and images per case (its evaluation script's rules)."""
        t = prompts.texts

        def fmt(name: str) -> str:
            return t[f"raw:{name}"].replace("{instruct}", item.instruction).replace("{reference}", ref_text) \
                .replace("{{", "{").replace("}}", "}")

        has_ref_img = item.reference is not None
        has_reason_img = _present(item.extra.get("reasoning_img"))
        first = "reference" if has_ref_img and item.category in ("spatial_reasoning", "logical_reasoning") else "source"
        logical = item.category == "logical_reasoning"
        if item.category in ("temporal_reasoning", "causal_reasoning"):
            rea, cons, qua = ("prompt_reasoning_w_input" if has_ref_img and has_reason_img else "prompt_reasoning",
                              "prompt_consist", "prompt_generation")
            rea_imgs = (first, "edited") if has_ref_img and has_reason_img else ("edited",)
        elif item.category == "spatial_reasoning":
            if has_ref_img:
                rea, rea_imgs = "prompt_spatial_ref_img", (first, "edited")
            elif has_reason_img:
                rea, rea_imgs = "prompt_spatial_ref_w_input", ("source", "edited")
            else:
                rea, rea_imgs = "prompt_spatial_ref", ("edited",)
            cons, qua = "prompt_spatial_cons", "prompt_spatial_qual"
        else:
            if _present(item.extra.get("reference_txt")):
                cons, rea, rea_imgs = "prompt_logical_cons_ans", "prompt_logical_txt", ("edited",)
            else:
                cons, rea, rea_imgs = "prompt_logical_cons", "prompt_logical_img", (first, "edited")
            qua = None
        for n in (rea, cons, qua):
            if n and f"raw:{n}" not in t:
                raise InputError(f"--prompts-from {prompts.source}: {n} not found in utils.py")
        lo, hi = (0, 1) if logical else (1, 5)
        qs = []
        if not free:
            qs.append(Question("consistency", fmt(cons), (first, "edited"), ("AC",), low=lo, high=hi))
        qs.append(Question("reasoning", fmt(rea), rea_imgs, ("R",), low=lo, high=hi))
        if qua:
            qs.append(Question("plausibility", fmt(qua), ("edited",), ("VP",)))
        return qs

    def parse_answer(self, q: Question, text: str | None, from_clone: bool) -> list[float] | None:
        if from_clone:
            m = _FINAL.search(text or "")
            nums = [float(x) for x in re.findall(r"\d+", m.group(1))] if m else []
            values = nums[:1] if nums else None
            if values and q.high == 1:  # the release reads any count >= 1 as right: min(score, 1)
                values = [min(values[0], 1.0)]
        else:
            values = super().parse_answer(q, text, from_clone)
        if not values or not q.low <= values[0] <= q.high:
            return None
        if q.high == 1:  # right/wrong, mapped to 1 or 5 as the release does
            values = [4 * min(values[0], 1) + 1]
        return values

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        return rise_item(item.category, dims, bool(item.extra.get("consistency_free")))

    def headline(self, figures: Mapping[str, float]) -> float:
        return figures["accuracy"]

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        figs = ("accuracy", "accuracy_as_released", "score", "score_100", "R", "AC", "VP")
        models = {}
        for model in sorted({r["model"] for r in rows}):
            mine = [r for r in rows if r["model"] == model]
            ok = []
            for r in mine:
                s = dict(r["scores"])
                if r.get("status") != "scored":
                    ok.append(r)  # its category's row stays; it carries no value
                    continue
                # the release compares a consistency-free case's missing consistency with 5: never complete
                s["accuracy_as_released"] = 0.0 if r.get("consistency_free") else s["accuracy"]
                ok.append({**r, "scores": s})
            models[model] = {"counts": counts(mine), "sections": [
                section("RISEBench", ok, figs, CATEGORIES, lambda r: r["category"], n_boot=n_boot, seed=seed)]}
        return {"benchmark": "rise", "title": "RISEBench", "protocol": self.spec.protocols["rise"], "models": models}
