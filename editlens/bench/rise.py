"""RISEBench (reasoning-informed visual editing): temporal, causal, spatial
and logical reasoning.

Each case is judged on Instruction Reasoning, Appearance Consistency (not
for cases marked ``consistency_free``) and Visual Plausibility (not for
logical cases), 1-5; logical cases are judged right/wrong (0/1, mapped to 1
or 5 as the release does). Protocol (the release's ``gpt_eval.py``, as of
commit ce8cba3 by default; ``--release f25d5f4`` the one before it):
**accuracy** = the share of cases with full marks (5) on every dimension
that applies to them (before ce8cba3 a consistency-free case never counts:
its missing consistency is compared with 5); beside it the release's
weighted score and its 0-100 form 25 x (score - 1). The weighted score is
0.3 AC + 0.7 R for logical cases and 0.3 AC + 0.5 R + 0.2 VP otherwise, but
0.2 VP + 0.8 R for *every* temporal/causal/spatial case once the data has a
``consistency_free`` column at all (the release tests the row's value, and a
missing value is NaN, which is true); halved, at least 1, when R is 1.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, ImageSending, Question, Reading, one_of
from editlens.bench.published import find_file
from editlens.bench.registry import register
from editlens.bench.table import counts, section
from editlens.errors import InputError

CATEGORIES = ("temporal_reasoning", "causal_reasoning", "spatial_reasoning", "logical_reasoning")
_FINAL = re.compile(r"\**\s*Final Scores?\s*\**\s*:?\s*\**\s*([\d\s,*]+)", re.I)


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and v != ""


#: the versions of the release's scoring (gpt_eval.py) reproduced, newest first
RELEASES = {
    "ce8cba3": "RISEBench gpt_eval.py as of commit ce8cba3 (2026-04-13): a consistency-free case is complete with "
               "full marks on reasoning and plausibility; weighted score 0.2 VP + 0.8 R for every temporal/causal/"
               "spatial case when the data has a consistency_free column (NaN is true)",
    "f25d5f4": "the commit before it (f25d5f4, 2026-02-03, and the releases since 674f864, 2025-05): a "
               "consistency-free case is never complete (its missing consistency is compared with 5); the same "
               "weighted score",
}


def completion(release: str, category: str, dims: Mapping[str, Any], consistency_free: bool) -> float:
    """1.0 when the case has full marks on what the release's ``calculate_completion`` checks, else 0.0."""
    def five(d: str) -> bool:
        return dims.get(d) == 5

    if category == "logical_reasoning":
        return float(five("AC") and five("R"))
    if consistency_free and release != "f25d5f4":
        return float(five("R") and five("VP"))
    return float(five("AC") and five("R") and five("VP"))


def rise_item(category: str, dims: Mapping[str, float], consistency_free: bool,
              free_column: bool = False) -> dict[str, float]:
    """Full marks (1/0) on every applicable dimension, and the release's weighted score
    (``free_column``: the data has a ``consistency_free`` column, so the release scores every
    temporal/causal/spatial case as consistency-free).

    >>> rise_item("causal_reasoning", {"R": 5, "AC": 5, "VP": 5}, False)["accuracy"]
    1.0
    >>> rise_item("causal_reasoning", {"R": 5, "VP": 5}, True)["accuracy"]  # consistency does not apply
    1.0
    >>> rise_item("causal_reasoning", {"R": 5, "AC": 4, "VP": 5}, False)["accuracy"]
    0.0
    >>> rise_item("causal_reasoning", {"R": 4, "AC": 1, "VP": 5}, False, free_column=True)["score"]
    4.2
    """
    r = dims["R"]
    if category == "logical_reasoning":
        score = 0.3 * dims["AC"] + 0.7 * r
    elif consistency_free or free_column:
        score = 0.2 * dims["VP"] + 0.8 * r
    else:
        score = 0.3 * dims["AC"] + 0.5 * r + 0.2 * dims["VP"]
    if r == 1:
        score = max(score * 0.5, 1.0)
    return {"accuracy": completion("ce8cba3", category, dims, consistency_free), "score": score,
            "score_100": 25.0 * (score - 1.0), **dims}


def final_scores(text: str | None) -> list[int] | None:
    """The numbers the release's ``extract`` takes from an answer: after the first 'Final Score'
    (any case, optional bold and colon) followed by digits, else after 'Final Scores'; ``None`` (or
    ``[]``) when there is none.

    >>> final_scores("**Final Score**: 4"), final_scores("Final Scores: 1, 5"), final_scores("looks right")
    ([4], [1, 5], None)
    """
    text = text or ""
    for label, last in (("Final Score", False), ("Final Scores", True)):
        matches = re.findall(rf"\*?\*?{label}\*?\*?:?\s*([\d*\s,\n]*)", text, re.I)
        if not matches:
            if last:
                return None
            continue
        numbers: list[int] = []
        for m in matches:
            found = re.findall(r"\d+", m.replace("\n", " "))
            if found:
                numbers = [int(x) for x in found]
                break
        if numbers or last:
            return numbers
    return None


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
                   "and 25x(score-1) beside it (gpt_eval.py of the chosen --release commit)"},
        table_layout={"sections": ["RISEBench"], "rows": list(CATEGORIES) + ["overall"],
                      "columns": ["accuracy", "score_100", "R", "AC", "VP"], "rank_by": {"figure": "accuracy"}},
        outputs="DIR/<model>/images/<category>/<index>.png (the release's outputs/<model>/ layout) or .jpg",
        dimensions={"R": "instruction reasoning, 1-5 (logical: right/wrong)",
                    "AC": "appearance consistency, 1-5 (logical: right/wrong); not for consistency-free cases",
                    "VP": "visual plausibility, 1-5; not for logical cases"},
        prompts_in_clone="utils.py (prompt_consist, prompt_reasoning, prompt_generation, prompt_spatial_*, "
                         "prompt_logical_*)",
        identical="layout, which dimensions apply to which case, the prompt and images of each call (with "
                  "--prompts-from; temporal/causal cases with a reasoning_img asked with the input image), "
                  "accuracy and the weighted score of gpt_eval.py as of commit ce8cba3 (--release f25d5f4: the "
                  "one before, where a consistency-free case is never complete), the weighted score's NaN quirk "
                  "(0.2 VP + 0.8 R for every temporal/causal/spatial case once the data has a consistency_free "
                  "column), its 25x(s-1) form, the 0/1 -> 1/5 mapping of logical cases; --answers release: an "
                  "unreadable answer makes the case incomplete (0) in accuracy and leaves it out of the score",
        differs="--answers strict: an unreadable answer is missing (left out of accuracy too) and counted, not an "
                "incomplete case; --images editlens sends PNG at the source's size",
        release_images=ImageSending(encoding="jpeg", sizes="native", max_side=768, rgb="alpha_or_palette",
                                    detail="high"),
        answer_policies={
            "release": "gpt_eval.py's extract: the numbers after the first 'Final Score' (any case, optional bold "
                       "and colon), else after 'Final Scores'; no range check; logical answers min(n, 1) mapped to "
                       "1/5; an answer with none is unreadable (an incomplete case, 0 in accuracy), one with several "
                       "numbers is unreadable (the release's script stops on it)",
            "strict": "with --prompts-from the first number after 'Final Score' within the scale, else unscored; "
                      "with editlens' prompts the JSON 'score' list",
        },
        releases=RELEASES,
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        from editlens.data.tables import read_rows

        f = find_file(Path(path), "data_total.json", "RISEBench's data file")
        items = []
        rows = read_rows(f).rows
        # the release's table has a consistency_free column when any case has the field (then NaN elsewhere)
        free_column = any(isinstance(r.values, dict) and "consistency_free" in r.values for r in rows)
        for r in rows:
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
            # the release's weighted-score test: the column exists and the value is missing (NaN) or true
            extra["scored_as_consistency_free"] = bool(free_column and (not _present(e.get("consistency_free"))
                                                                        or e.get("consistency_free")))
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
            # the release (since f25d5f4; before it too on the full data, whose every row has a reference_img
            # column) asks with the input image whenever the case has a reasoning_img
            rea, cons, qua = ("prompt_reasoning_w_input" if has_reason_img else "prompt_reasoning",
                              "prompt_consist", "prompt_generation")
            rea_imgs = ("source", "edited") if has_reason_img else ("edited",)
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

    def release_answer(self, q: Question, text: str | None) -> Reading:
        nums = final_scores(text)
        if not nums:
            return Reading(None, "no number after 'Final Score' (the release counts the case incomplete)")
        if len(nums) != 1:
            return Reading(None, f"{len(nums)} numbers after 'Final Score' (the release's script stops on it)")
        v = float(nums[0])
        if q.high == 1:  # right/wrong: the release maps min(n, 1) to 1 or 5
            v = 4 * min(v, 1.0) + 1
        return Reading({q.dimensions[0]: v})

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        return rise_item(item.category, dims, bool(item.extra.get("consistency_free")),
                         bool(item.extra.get("scored_as_consistency_free")))

    def headline(self, figures: Mapping[str, float]) -> float:
        return figures["accuracy"]

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        figs = ("accuracy", "score", "score_100", "R", "AC", "VP")
        release = self.release_version() or "ce8cba3"
        models = {}
        for model in sorted({r["model"] for r in rows}):
            mine = [r for r in rows if r["model"] == model]
            ok = []
            for r in mine:
                s = dict(r["scores"])
                if r.get("status") == "scored":
                    s["accuracy"] = completion(release, r["category"], s, bool(r.get("consistency_free")))
                elif r.get("status") == "unscored" and self.answers == "release":
                    s = {"accuracy": 0.0}  # the release: an unreadable case is incomplete (0), its score NaN
                ok.append({**r, "scores": s})  # other rows stay in their category, carrying no value
            models[model] = {"counts": counts(mine), "sections": [
                section("RISEBench", ok, figs, CATEGORIES, lambda r: r["category"], n_boot=n_boot, seed=seed)]}
        return {"benchmark": "rise", "title": "RISEBench", "protocol": self.spec.protocols["rise"], "models": models,
                "release": {"commit": release, "what": RELEASES[release]}}
