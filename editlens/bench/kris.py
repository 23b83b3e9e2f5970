"""KRIS-Bench (knowledge-based reasoning in image editing, NeurIPS 2025).

Each edit is judged on Visual Consistency (VC), Visual Quality (VQ) and
Instruction Following (IF), 1-5 each, and on Knowledge Plausibility (KP) in
the ten knowledge categories. Protocol: the mean of each dimension, scaled
to 0-100 as (mean - 1) x 25 (1 -> 0, 5 -> 100), per category, per knowledge
type (factual / conceptual / procedural) and overall; an item's overall
score is the mean of its applicable dimensions, scaled the same way.
The release ships the judging scripts but no summarising script (its
issue #1); the scaling is the one its community tooling uses.

Each category is asked as the release's script for it asks (:data:`SCRIPT_OF`):
the prompt text first, then every image after a short caption. Most show the
original then the edited image; knowledge categories ask instruction following
and knowledge plausibility in one call; viewpoint change adds the ground-truth
view to the instruction-following call; multi-element composition shows every
input image; temporal prediction shows the given frames and the edited frame
in frame order. The quality call shows the edited image alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, ImageSending, Question, Reading
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

#: the release's judging script of each category (metrics_<script>.py): it decides the prompts, the
#: images shown and their captions. Temporal prediction and multi-element composition read several
#: source images; viewpoint change compares with the ground-truth image.
SCRIPT_OF = {c: ("knowledge" if c in WITH_KNOWLEDGE else "common") for c in CATEGORIES} | {
    "viewpoint_change": "view", "temporal_prediction": "temporal", "multi-element_composition": "multi"}
MULTI_SOURCE = ("temporal", "multi")
#: per script: (question, prompt, dimensions, images shown) for each judge call, in the release's order
PLANS = {
    "common": (("VC", "VC", ("VC",), "pair"), ("IF", "IF", ("IF",), "pair"), ("VQ", "VQ", ("VQ",), "alone")),
    "knowledge": (("VC", "VC", ("VC",), "pair"), ("IF_KP", "IF_KP", ("IF", "KP"), "pair"),
                  ("VQ", "VQ", ("VQ",), "alone")),
    "view": (("VC", "VC", ("VC",), "pair"), ("IF", "IF_VIEW", ("IF",), "pair+reference"),
             ("VQ", "VQ", ("VQ",), "alone")),
    "multi": (("VC", "VC_MULTI", ("VC",), "inputs"), ("IF", "IF_MULTI", ("IF",), "inputs"),
              ("VQ", "VQ", ("VQ",), "alone")),
    "temporal": (("VC", "VC_TEMPORAL", ("VC",), "frames"), ("IF", "IF_TEMPORAL", ("IF",), "frames"),
                 ("VQ", "VQ", ("VQ",), "alone")),
}
#: prompts the release sends as written, without str.format (doubled braces stay doubled)
UNFORMATTED = ("VQ",)
#: prompt -> its name in the clone's utils/prompts.py
CLONE_PROMPTS = {"VC": "prompt_consist", "VQ": "prompt_quality", "IF": "prompt_instruction_following",
                 "IF_KP": "prompt_dual_evaluation", "IF_VIEW": "prompt_view_instruction_following",
                 "VC_MULTI": "prompt_consist_multi", "IF_MULTI": "prompt_instruction_multi",
                 "VC_TEMPORAL": "prompt_consist_temporal", "IF_TEMPORAL": "prompt_instruction_temporal"}
#: caption names (``caption.<script>.<name>``, str.format templates) as the clone's scripts hold them:
#: script file, function, and the names of the message texts it writes in order (then, for frames,
#: of the labels of the tuples it appends)
CLONE_CAPTIONS = {
    "common": ("metrics_common.py", (("evaluate_with_gpt", ("original", "edited"), ()),)),
    "knowledge": ("metrics_knowledge.py", (("evaluate_with_gpt", ("original", "edited"), ()),)),
    "view": ("metrics_view_change.py", (("evaluate_with_gpt", ("original", "edited", "ground_truth"), ()),)),
    "multi": ("metrics_multi_element.py", (("evaluate_multi_element_with_gpt", ("input", "output"), ()),
                                           ("evaluate_with_gpt", ("quality",), ()))),
    "temporal": ("metrics_temporal_prediction.py", (("evaluate_temporal_with_gpt", ("frame",), ("given", "made")),
                                                    ("evaluate_with_gpt", ("quality",), ()))),
}
CAPTIONS = tuple(f"caption.{script}.{name}" for script, (_, fns) in CLONE_CAPTIONS.items()
                 for _, texts, labels in fns for name in texts + labels)
#: how a script sends images when it differs from the files' bytes (the temporal one re-encodes JPEG, quality 85)
SENDING_OF = {"temporal": ImageSending(encoding="jpeg", sizes="native", quality=85, rgb="always")}
#: scripts that call the shared extractor without its '<dimension> score: N' pattern (the others have it)
NO_NAME_PATTERN = ("temporal", "multi")
_WORD = {"VC": "consistency", "IF": "instruction", "VQ": "quality", "KP": "knowledge"}
_FRAME = re.compile(r"(\d+)-(\d+)")
_CLONE_FIELD = re.compile(r"\{\{|\}\}|\{(instruct|explanation|N)\}")


def frame_number(name: str) -> int | None:
    """A temporal case's frame number, as its release reads it from the file name
    (the second number of the first ``<a>-<b>``).

    >>> frame_number("12-3.jpg"), frame_number("frame3.jpg")
    (3, None)
    """
    m = _FRAME.search(name)
    return int(m.group(2)) if m else None


def predicted_frame(given: Sequence[int]) -> int:
    """The edited frame's number: the one of 1-4 the given frames lack, else the next after them.

    >>> predicted_frame([1, 2, 4]), predicted_frame([1, 2]), predicted_frame([])
    (3, 3, 1)
    """
    missing = {1, 2, 3, 4} - set(given)
    if len(missing) == 1:
        return missing.pop()
    return max(given) + 1 if given else 1


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
                 "ori_img": "source (a list: every image shown to the judge in order, the first given to editors)",
                 "ins_en": "instruction",
                 "explain_en": "knowledge explanation (shown to the knowledge judge)",
                 "gt_img": "reference (viewpoint_change: shown to the instruction-following judge; required there)"},
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
                         "prompt_dual_evaluation, prompt_view_instruction_following, prompt_consist_multi, "
                         "prompt_instruction_multi, prompt_consist_temporal, prompt_instruction_temporal) and the "
                         "image captions of metrics_common.py, metrics_knowledge.py, metrics_view_change.py, "
                         "metrics_multi_element.py and metrics_temporal_prediction.py",
        identical="layout (annotation.json per category, outputs <id>.jpg then .png), the 1-5 dimensions; per "
                  "category the release script's calls: its prompts (with --prompts-from, as are the captions "
                  "before each image, read from the clone's scripts), the prompt text first and then each image "
                  "after its caption, every image at its own size; knowledge plausibility asked with instruction "
                  "following in one call in the ten knowledge categories; viewpoint_change's instruction call "
                  "showing original, edited and ground-truth images; multi-element_composition showing every input "
                  "image in order then the edit; temporal_prediction showing the given frames and the edited frame "
                  "ordered by the frame numbers in the file names (the edit is the frame of 1-4 they lack, else the "
                  "next); the quality call showing only the edited image, its prompt sent as written (unformatted); "
                  "anomaly_correction judged with the plain instruction-following prompt (the release's test for "
                  "its special prompt names a category that does not exist, so it is never used)",
        differs="--answers strict: the release's regex fallback (any digit 1-5 in the answer) is not used and such "
                "answers are missing; a case the release would skip for a missing file (gt_img in viewpoint_change, "
                "an input image) stops the read with an error naming it; --images editlens sends decoded images "
                "re-encoded as PNG; the summary (scaling to 100) follows its community tooling, it has none",
        judge_image_sizes="native",
        release_images=ImageSending(encoding="file", sizes="native", mime="image/jpeg"),
        answer_policies={
            "release": "the scripts' extractors: the first {...} block holding the score key, read as JSON (int() of "
                       "its value, no range check); failing that, 'consistency/instruction/quality score: N', 'N/5', "
                       "'N out of 5', then any lone digit 1-5 (the knowledge script: the 'score: N' pattern needs the "
                       "colon, a JSON null is not looked further for, and its instruction+knowledge answer falls back "
                       "to the two 'score: N' patterns only; the temporal and multi-element scripts have no '<name> score' "
                       "pattern); as read from the scripts at Kris_Bench commit 2114fec",
            "strict": "integer scores 1-5 under the score keys of the answer's JSON object (or 'key: N' lines); "
                      "anything else unscored",
        },
        keep_readable_dimensions=True,
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
                items.append(self._item(root, cat, e, where))
        if not items:
            raise InputError(f"{root}: no <category>/annotation.json in it")
        return items

    def _item(self, root: Path, cat: str, e: dict[str, Any], where: str) -> BenchItem:
        script = SCRIPT_OF[cat]
        ori = e.get("ori_img")
        srcs: list[Any] = ori if isinstance(ori, list) else [ori]
        if not srcs or not all(isinstance(s, str) and s for s in srcs):
            raise InputError(f"{where}: 'ori_img' must be a file name or a list of them")
        if len(srcs) > 1 and script not in MULTI_SOURCE:
            raise InputError(f"{where}: 'ori_img' lists {len(srcs)} images, but the release judges {cat} with one "
                             "original image")
        for s in srcs:
            if not (root / cat / s).is_file():
                raise InputError(f"{where}: source image {s!r} not found in {root / cat}")
        ins = e.get("ins_en")
        if not isinstance(ins, str) or not ins.strip():
            raise InputError(f"{where}: 'ins_en' (the instruction) is missing or empty")
        gt = e.get("gt_img")
        ref = root / cat / gt if isinstance(gt, str) and gt and (root / cat / gt).is_file() else None
        if script == "view" and ref is None:
            raise InputError(f"{where}: 'gt_img' " + (f"{gt!r} not found in {root / cat}" if isinstance(gt, str) and gt
                                                       else "is missing")
                             + f"; the release judges {cat}'s instruction following against this ground-truth view")
        extra = {**{k: v for k, v in e.items() if k not in ("ori_img", "ins_en", "key")},
                 "knowledge_type": TYPE_OF[cat], "explain": e.get("explain_en") or "",
                 "sources": len(srcs), "reference_image": str(ref) if ref else None}
        if script == "temporal":
            frames = [frame_number(s) for s in srcs]
            bad = [s for s, n in zip(srcs, frames) if n is None]
            if bad:
                raise InputError(f"{where}: 'ori_img' {bad[0]!r} has no '<clip>-<frame>' number in its name; the "
                                 f"release orders {cat}'s frames by it")
            extra["frames"] = frames
            extra["edited_frame"] = predicted_frame([n for n in frames if n is not None])
        return BenchItem(f"{cat}/{e['key']}", str(e["key"]), ins.strip(), root / cat / srcs[0], cat, "en",
                         reference=ref if script == "view" else None, extra=extra,
                         sources=tuple(root / cat / s for s in srcs) if len(srcs) > 1 else ())

    def output_candidates(self, item: BenchItem) -> list[str]:
        return [f"{item.category}/{item.key}.jpg", f"{item.category}/{item.key}.png"] + super().output_candidates(item)

    def prompt_names(self) -> list[str]:
        return list(CLONE_PROMPTS) + list(CAPTIONS)

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        from editlens.templates.clones import appended_labels, find_module, message_texts, module_strings

        f = find_module(clone, ["utils/prompts.py", "prompts.py"], "--prompts-from", "KRIS-Bench")
        s = module_strings(f, "--prompts-from")
        out = {k: s[v] for k, v in CLONE_PROMPTS.items() if v in s}
        # the captions live in the judging scripts at the clone's root (beside utils/)
        roots = [clone] if clone.is_dir() else [f.parent, f.parent.parent]
        for script, (name, functions) in CLONE_CAPTIONS.items():
            found = next((r / name for r in roots if (r / name).is_file()), None)
            if found is None:
                raise InputError(f"--prompts-from {clone}: {name} not found (looked in "
                                 f"{', '.join(str(r) for r in roots)}); its image captions are read from it")
            for fn, texts, labels in functions:
                got = message_texts(found, fn, "--prompts-from")
                words = appended_labels(found, fn, "--prompts-from") if labels else []
                if len(got) != len(texts) or len(words) != len(labels):
                    raise InputError(f"--prompts-from {found}: {fn}() writes {len(got)} image caption(s)"
                                     + (f" and {len(words)} frame label(s)" if labels else "")
                                     + f"; the release's has {len(texts)}"
                                     + (f" and {len(labels)}" if labels else "") + " (is it another version?)")
                out.update({f"caption.{script}.{n}": t for n, t in zip(texts, got)})
                out.update({f"caption.{script}.{n}": w for n, w in zip(labels, words)})
        return out

    def fallback_prompts(self) -> dict[str, str]:
        import json
        from importlib import resources

        from editlens.judges.templates import load_template

        out = {n: load_template(f"bench_kris_{n.lower()}").text for n in CLONE_PROMPTS}
        captions = json.loads(resources.files("editlens.templates").joinpath("bench_kris_captions.json")
                              .read_text(encoding="utf-8"))
        return out | {f"caption.{k}": v for k, v in captions.items() if not k.startswith("_")}

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        script = SCRIPT_OF[item.category]
        values = {"instruction": item.instruction, "explanation": item.extra.get("explain", ""),
                  "frame": str(item.extra.get("edited_frame", ""))}
        if prompts.from_clone:
            fields = {"instruct": values["instruction"], "explanation": values["explanation"], "N": values["frame"]}

            def fill(n: str) -> str:  # as str.format(instruct=, explanation=, N=) fills the release's prompts
                if n in UNFORMATTED:
                    return prompts.fill(n)
                return _CLONE_FIELD.sub(lambda m: fields[m.group(1)] if m.group(1) else m.group(0)[0],
                                        prompts.fill(n))
        else:
            def fill(n: str) -> str:
                return prompts.fill(n, **values)

        def caption(name: str, *args: Any) -> str:
            return str(prompts.texts[f"caption.{script}.{name}"]).format(*args)

        qs = []
        for qname, prompt, dims, shown in PLANS[script]:
            if shown in ("pair", "pair+reference"):
                images = [("source", caption("original")), ("edited", caption("edited"))]
                if shown == "pair+reference":
                    images.append(("reference", caption("ground_truth")))
            elif shown == "alone":
                images = [("edited", caption("quality" if script in MULTI_SOURCE else "edited"))]
            elif shown == "inputs":
                n = len(item.all_sources())
                images = [(f"source:{i}", caption("input", i + 1)) for i in range(n)] + [("edited", caption("output"))]
            else:  # frames: the given ones and the edit, by frame number (the edit after a given frame of its number)
                given, made = prompts.texts[f"caption.{script}.given"], prompts.texts[f"caption.{script}.made"]
                frames = [(num, f"source:{i}", given) for i, num in enumerate(item.extra["frames"])]
                frames.append((item.extra["edited_frame"], "edited", made))
                images = [(role, caption("frame", num, word)) for num, role, word in sorted(frames, key=lambda t: t[0])]
            qs.append(Question(qname, fill(prompt), tuple(r for r, _ in images), dims,
                               captions=tuple(c for _, c in images), sending=SENDING_OF.get(script), reader=script))
        return qs

    def parse_answer(self, q: Question, text: str | None, from_clone: bool) -> list[float] | None:
        if not from_clone:
            return super().parse_answer(q, text, from_clone)
        return json_keys(text, [DIMS[d] for d in q.dimensions])

    def release_answer(self, q: Question, text: str | None) -> Reading:
        text = text or ""
        if q.reader == "knowledge" and q.dimensions == ("IF", "KP"):
            got = dual_scores(text)
        elif q.reader == "knowledge":
            got = {q.dimensions[0]: knowledge_score(text, DIMS[q.dimensions[0]], _WORD[q.dimensions[0]])}
        else:
            d = q.dimensions[0]
            got = {d: common_score(text, DIMS[d], None if q.reader in NO_NAME_PATTERN else _WORD[d])}
        values = {d: float(v) for d, v in got.items() if v is not None}
        if not values:
            return Reading(None, f"no score the release's {q.reader} script reads")
        return Reading(values)

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        # every dimension read is kept (an item may lack one whose answer was unreadable, as in the release)
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
            c = counts(mine)
            # items scored on the dimensions that were read, one or more answers being unreadable
            lacking = {d: sum(1 for r in mine if r.get("status") == "scored" and d not in r["scores"]
                              and (d != "KP" or r["category"] in WITH_KNOWLEDGE)) for d in DIMS}
            c["scored_without"] = {d: n for d, n in lacking.items() if n}
            models[model] = {"counts": c, "sections": [
                section("by category", ok, figs, CATEGORIES, lambda r: r["category"], n_boot=n_boot, seed=seed),
                section("by knowledge type", ok, figs, tuple(KNOWLEDGE_TYPES), lambda r: TYPE_OF[r["category"]],
                        n_boot=n_boot, seed=seed)]}
        return {"benchmark": "kris", "title": "KRIS-Bench", "protocol": self.spec.protocols["kris"], "models": models}


_FALLBACKS = (r"([1-5])\s*/\s*5", r"([1-5])\s+out\s+of\s+5")


def _json_block(text: str, key: str) -> Any:
    """The first ``{...}`` (no nested braces) naming ``key``, parsed; ``None`` when there is none,
    ``ValueError`` when it is not JSON."""
    m = re.search(r"\{[^{}]*" + re.escape(key) + r"[^{}]*\}", text, re.S)
    if not m:
        return None
    import json

    return json.loads(m.group(0))


def common_score(text: str, key: str, word: str | None) -> int | None:
    """A score as the release's shared extractor (``metrics_common.py``) reads it: the JSON block's
    ``key`` (``int()`` of it); else ``<word> score: N`` (colon optional), ``N/5``, ``N out of 5``, then
    the first lone digit 1-5.

    >>> common_score("I would rate this 4/5.", "quality_score", "quality")
    4
    >>> common_score('{"consistency_score": 3, "reasoning": "ok"}', "consistency_score", "consistency")
    3
    """
    try:
        data = _json_block(text, key)
        if data is not None and data.get(key) is not None:
            return int(data.get(key))
    except Exception:  # the release catches everything here and falls back to its patterns
        pass
    pats = ([rf"{word}[_\s]*score\s*[:：]?\s*([1-5])"] if word else []) + list(_FALLBACKS) + [r"\b([1-5])\b"]
    for pat in pats:
        m = re.search(pat, text, re.I | re.S)
        if m:
            return int(m.group(1))
    return None


def knowledge_score(text: str, key: str, word: str) -> int | None:
    """A consistency or quality score as the knowledge script reads it: the JSON block's ``key``
    (a null there is final); else ``<word> score: N`` (colon required), ``N/5``, ``N out of 5``,
    then the first lone digit 1-5."""
    try:
        data = _json_block(text, key)
        if data is not None:
            return int(data.get(key, 0)) if data.get(key) is not None else None
    except Exception:  # not JSON (or not an integer): the patterns below
        pass
    for pat in (rf"{word}[_\s]*score\s*[:：]\s*([1-5])",) + _FALLBACKS:
        m = re.search(pat, text, re.I)
        if m:
            return int(m.group(1))
    digits = re.findall(r"\b([1-5])\b", text)
    return int(digits[0]) if digits else None


def dual_scores(text: str) -> dict[str, int | None]:
    """Instruction following and knowledge plausibility as the knowledge script reads its one
    answer: both from the JSON block naming ``instruction_score``; else each from its own
    ``<name> score: N`` (colon required), no other fallback."""
    try:
        data = _json_block(text, "instruction_score")
        if data is not None:
            return {d: (int(data.get(DIMS[d], 0)) if data.get(DIMS[d]) is not None else None) for d in ("IF", "KP")}
    except Exception:  # the release falls back to its two patterns
        pass
    out: dict[str, int | None] = {}
    for d in ("IF", "KP"):
        m = re.search(rf"{_WORD[d]}[_\s]*score\s*[:：]\s*([1-5])", text, re.I)
        out[d] = int(m.group(1)) if m else None
    return out


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
