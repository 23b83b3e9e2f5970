"""KRIS-Bench (knowledge-based reasoning in image editing, NeurIPS 2025).

Each edit is judged on Visual Consistency (VC), Visual Quality (VQ) and
Instruction Following (IF), 1-5 each, and on Knowledge Plausibility (KP) in
the ten knowledge categories. Protocol: the mean of each dimension, scaled
to 0-100 as (mean - 1) x 25 (1 -> 0, 5 -> 100), per category, per knowledge
type (factual / conceptual / procedural) and overall; an item's overall
score is the mean of its applicable dimensions, scaled the same way.
The release ships the judging scripts but no summarising script (its
issue #1); the scaling is the one its community tooling uses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, Question
from editlens.bench.registry import register
from editlens.bench.table import counts, section
from editlens.errors import InputError

KNOWLEDGE_TYPES = {
    "factual": ("count_change", "color_change", "size_adjustment", "part_completion", "anomaly_correction",
                "position_movement", "viewpoint_change", "temporal_prediction"),
    "conceptual": ("practical_knowledge", "humanities", "biology", "chemistry", "geography", "mathematics",
                   "medicine", "physics"),
    "procedural": ("abstract_reasoning", "rule-based_reasoning", "multi-instruction_execution",
                   "multi-element_composition"),
}
CATEGORIES = tuple(c for cs in KNOWLEDGE_TYPES.values() for c in cs)
#: categories whose edits are also judged on knowledge plausibility
WITH_KNOWLEDGE = ("abstract_reasoning", "mathematics", "practical_knowledge", "medicine", "rule-based_reasoning",
                  "biology", "geography", "chemistry", "humanities", "physics")
TYPE_OF = {c: t for t, cs in KNOWLEDGE_TYPES.items() for c in cs}
DIMS = {"VC": "consistency_score", "VQ": "quality_score", "IF": "instruction_score", "KP": "knowledge_score"}


def scale100(mean_1_to_5: float) -> float:
    """1-5 -> 0-100 as (s - 1) x 25.

    >>> scale100(1), scale100(3.5), scale100(5)
    (0.0, 62.5, 100.0)
    """
    return (float(mean_1_to_5) - 1.0) * 25.0


@register
class KrisBench(Benchmark):
    spec = BenchSpec(
        name="kris",
        title="KRIS-Bench",
        homepage="https://github.com/mercurystraw/Kris_Bench",
        download="git clone https://github.com/mercurystraw/Kris_Bench (the KRIS_Bench/ folder of the release; "
                 "or hf download wukeming11/kris-bench --repo-type dataset for the community parquet)",
        layout="KRIS_Bench/<category>/annotation.json {id: {ori_img (a file or a list), ins_en, explain_en, "
               "gt_img?}} with the images beside it",
        columns={"<category> folder": "category (20 folders, 22 tasks)", "id": "item id (names the output file)",
                 "ori_img": "source (the first when a list)", "ins_en": "instruction",
                 "explain_en": "knowledge explanation (shown to the knowledge judge)", "gt_img": "reference (kept)"},
        categories=CATEGORIES, languages=("en",),
        protocols={"kris": "mean of VC, VQ, IF (and KP in knowledge categories), each 1-5, scaled (mean-1)x25 to "
                   "0-100, per category, per knowledge type and overall; item overall = mean of its dimensions"},
        table_layout={"sections": ["by category", "by knowledge type"], "columns": ["VC", "VQ", "IF", "KP", "overall"],
                      "rank_by": {"figure": "overall"}},
        outputs="DIR/<model>/<category>/<id>.jpg or .png (the release's results/<model>/ layout)",
        dimensions={"VC": "visual consistency of what the instruction did not ask to change, 1-5",
                    "VQ": "visual quality of the edited image alone, 1-5",
                    "IF": "instruction following, 1-5",
                    "KP": "knowledge plausibility given the explanation, 1-5 (knowledge categories)"},
        prompts_in_clone="utils/prompts.py (prompt_consist, prompt_quality, prompt_instruction_following, "
                         "prompt_dual_evaluation)",
        identical="layout (annotation.json per category, outputs <id>.jpg then .png), the 1-5 dimensions and which "
                  "categories get knowledge plausibility (asked with instruction following in one call), the "
                  "prompts' text with --prompts-from, the quality call showing only the edited image",
        differs="the release's regex fallback (any digit 1-5 in the answer) is not used: such answers are missing; "
                "multi-image sources are judged with their first image; the release's short captions before each "
                "image are not added; the summary (scaling to 100) follows its community tooling, it has none",
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        root = Path(path)
        if not root.is_dir():
            raise InputError(f"{root}: expected the KRIS_Bench folder (one folder per category with annotation.json)")
        if not any((root / c / "annotation.json").is_file() for c in CATEGORIES) and (root / "KRIS_Bench").is_dir():
            root = root / "KRIS_Bench"
        items = []
        for cat in sorted(p.name for p in root.iterdir() if (p / "annotation.json").is_file()):
            f = root / cat / "annotation.json"
            if cat not in CATEGORIES:
                raise InputError(f"{f}: category {cat!r} is not one of KRIS-Bench's {list(CATEGORIES)}")
            from editlens.data.tables import read_rows

            for r in read_rows(f).rows:  # {id: {...}}: the id becomes the 'key' column
                e, where = r.values, r.where
                if e is None:
                    raise InputError(f"{where}: {r.error}")
                iid = e["key"]
                ori = e.get("ori_img")
                srcs: list[Any] = ori if isinstance(ori, list) else [ori]
                if not srcs or not all(isinstance(s, str) and s for s in srcs):
                    raise InputError(f"{where}: 'ori_img' must be a file name or a list of them")
                for s in srcs:
                    if not (root / cat / s).is_file():
                        raise InputError(f"{where}: source image {s!r} not found in {root / cat}")
                ins = e.get("ins_en")
                if not isinstance(ins, str) or not ins.strip():
                    raise InputError(f"{where}: 'ins_en' (the instruction) is missing or empty")
                gt = e.get("gt_img")
                ref = root / cat / gt if isinstance(gt, str) and gt and (root / cat / gt).is_file() else None
                items.append(BenchItem(f"{cat}/{iid}", str(iid), ins.strip(), root / cat / srcs[0], cat, "en",
                                       reference=None,
                                       extra={**{k: v for k, v in e.items() if k not in ("ori_img", "ins_en", "key")},
                                              "knowledge_type": TYPE_OF[cat], "explain": e.get("explain_en") or "",
                                              "sources": len(srcs), "reference_image": str(ref) if ref else None}))
        if not items:
            raise InputError(f"{root}: no <category>/annotation.json in it")
        return items

    def output_candidates(self, item: BenchItem) -> list[str]:
        return [f"{item.category}/{item.key}.jpg", f"{item.category}/{item.key}.png"] + super().output_candidates(item)

    def prompt_names(self) -> list[str]:
        return ["VC", "VQ", "IF", "IF_KP"]

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        from editlens.templates.clones import find_module, module_strings

        f = find_module(clone, ["utils/prompts.py", "prompts.py"], "--prompts-from", "KRIS-Bench")
        s = module_strings(f, "--prompts-from")
        names = {"VC": "prompt_consist", "VQ": "prompt_quality", "IF": "prompt_instruction_following",
                 "IF_KP": "prompt_dual_evaluation"}
        return {k: s[v] for k, v in names.items() if v in s}

    def fallback_prompts(self) -> dict[str, str]:
        from editlens.judges.templates import load_template

        return {n: load_template(f"bench_kris_{n.lower()}").text for n in self.prompt_names()}

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        explain = item.extra.get("explain", "")
        if prompts.from_clone:
            def fill(n: str) -> str:
                return prompts.fill(n).replace("{{", "\x00").replace("}}", "\x01").replace(
                    "{instruct}", item.instruction).replace("{explanation}", explain).replace(
                    "\x00", "{").replace("\x01", "}")
        else:
            def fill(n: str) -> str:
                return prompts.fill(n, instruction=item.instruction, explanation=explain)
        qs = [Question("VC", fill("VC"), ("source", "edited"), ("VC",))]
        if item.category in WITH_KNOWLEDGE:
            qs.append(Question("IF_KP", fill("IF_KP"), ("source", "edited"), ("IF", "KP")))
        else:
            qs.append(Question("IF", fill("IF"), ("source", "edited"), ("IF",)))
        qs.append(Question("VQ", fill("VQ"), ("edited",), ("VQ",)))
        return qs

    def parse_answer(self, q: Question, text: str | None, from_clone: bool) -> list[float] | None:
        if not from_clone:
            return super().parse_answer(q, text, from_clone)
        return json_keys(text, [DIMS[d] for d in q.dimensions])

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        out = {d: scale100(v) for d, v in dims.items()}
        out["overall"] = scale100(sum(dims.values()) / len(dims))
        return out

    def headline(self, figures: Mapping[str, float]) -> float:
        return figures["overall"]

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        figs = ("VC", "VQ", "IF", "KP", "overall")
        models = {}
        for model in sorted({r["model"] for r in rows}):
            mine = [r for r in rows if r["model"] == model]
            ok = mine  # unscored/skipped rows carry no values: rows stay, means use scored items only
            models[model] = {"counts": counts(mine), "sections": [
                section("by category", ok, figs, CATEGORIES, lambda r: r["category"], n_boot=n_boot, seed=seed),
                section("by knowledge type", ok, figs, tuple(KNOWLEDGE_TYPES), lambda r: TYPE_OF[r["category"]],
                        n_boot=n_boot, seed=seed)]}
        return {"benchmark": "kris", "title": "KRIS-Bench", "protocol": self.spec.protocols["kris"], "models": models}


def json_keys(text: str | None, keys: Sequence[str]) -> list[float] | None:
    """Integer scores 1-5 under ``keys`` in the answer's JSON object (or
    ``key: N`` lines); ``None`` unless every key is found.

    >>> json_keys('I compared... {"reasoning": "ok", "consistency_score": 4}', ["consistency_score"])
    [4.0]
    >>> json_keys("The score is 4.", ["consistency_score"]) is None
    True
    """
    from editlens.judges.parsing import parse_object

    if not text:
        return None
    obj = parse_object(text) or {}
    out = []
    for k in keys:
        v = obj.get(k)
        if v is None:
            m = re.search(rf"{re.escape(k)}\W{{0,4}}\s*[:：]?\s*([1-5])\b", text, re.I)
            v = m.group(1) if m else None
        try:
            f = float(v) if v is not None else None
        except (TypeError, ValueError):
            f = None
        if f is None or not 1 <= f <= 5:
            return None
        out.append(f)
    return out
