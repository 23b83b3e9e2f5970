"""GEdit-Bench (Step1X-Edit): 11 task types, English and Chinese
instructions, VIEScore semantic consistency (SC) and perceptual quality (PQ).

Protocol (the release's ``calculate_statistics.py``): per item SC = min of
the SC answer's scores, PQ = min of the PQ answer's scores (0-10), O =
sqrt(SC x PQ) — the minimum is taken *before* the square root; per task type
and language the mean of each; the language's "average" is the unweighted
mean over the 11 task types (not over items); the same again on the
intersection subset (``Intersection_exist``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, ImageSending, Question, Reading, one_of
from editlens.bench.published import image, table_rows, text_field
from editlens.bench.registry import register
from editlens.bench.table import counts, section

TASKS = ("background_change", "color_alter", "material_alter", "motion_change", "ps_human", "style_change",
         "subject-add", "subject-remove", "subject-replace", "text_change", "tone_transfer")
LANGUAGES = ("en", "cn")
COLUMNS = ("key", "task_type", "instruction", "instruction_language", "input_image", "Intersection_exist")


@register
class GEditBench(Benchmark):
    spec = BenchSpec(
        name="gedit",
        title="GEdit-Bench",
        homepage="https://github.com/stepfun-ai/Step1X-Edit/tree/main/GEdit-Bench",
        download="hf download stepfun-ai/GEdit-Bench --repo-type dataset --local-dir GEdit-Bench",
        layout="the hub dataset (parquet/arrow files, images embedded as {bytes, path}); one row per instruction",
        columns={"key": "item id (names the output file)", "input_image": "source (the resized input the release "
                 "judges against)", "input_image_raw": "full-size source (kept, not judged)",
                 "instruction": "instruction", "task_type": "category (11)", "instruction_language": "language (en/cn)",
                 "Intersection_exist": "member of the intersection subset"},
        categories=TASKS, languages=LANGUAGES,
        protocols={"gedit": "per item SC=min(SC scores), PQ=min(PQ scores), O=sqrt(SC*PQ) on 0-10; mean per task "
                   "type; average = unweighted mean of the 11 task means; per language, full set and intersection"},
        table_layout={"sections": ["EN fullset", "EN intersection", "CN fullset", "CN intersection"],
                      "rows": list(TASKS) + ["average"], "columns": ["SC", "PQ", "O"],
                      "rank_by": {"section": "EN fullset", "figure": "O"}},
        outputs="DIR/<model>/fullset/<task_type>/<en|cn>/<key>.png (the release's layout) or DIR/<model>/<key>.png",
        split="train",
        dimensions={"SC": "semantic consistency: two scores 0-10 (instruction success, over-editing)",
                    "PQ": "perceptual quality: two scores 0-10 (naturalness, artifacts)"},
        prompts_in_clone="GEdit-Bench/viescore/vie_prompts.py (the 'tie' task's SC and PQ prompts)",
        identical="output layout, SC/PQ as the minimum of each answer's scores, O = sqrt(SC*PQ) per item, the "
                  "per-task mean and the unweighted mean over task types, the intersection subset, the edited "
                  "image resized to the source size; with --prompts-from, the prompt text and image order",
        differs="an answer the release cannot read either is missing (counted, shown), where the release asks "
                "again and then guesses a random score; bootstrap CIs are added; the judge model is pinned in the "
                "manifest",
        release_images=ImageSending(encoding="jpeg", sizes="source", exif_transpose=True, rgb="always"),
        answer_policies={
            "release": "viescore's mllm_output_to_dict: the JSON between two '||V^=^V||' delimiters, else from the "
                       "first '{' to the last '}', else a bare '[a, b]' list or a lone integer 0-10; newlines "
                       "dropped, unquoted keys and values repaired; any number of scores, no range check (SC/PQ = "
                       "their minimum). An answer it cannot read makes the release ask again and then guess "
                       "random.randint(0, 10): here it stays unscored and is counted (release_would_invent)",
            "strict": "exactly two scores in [0, 10] from the JSON 'score' field, a 'score: [a, b]' label or an "
                      "answer that is only the list; anything else unscored",
        },
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        items = []
        for where, row, base in table_rows(path, COLUMNS, self.split):
            key = text_field(row, "key", where)
            task = one_of(row["task_type"], TASKS, where, "task_type")
            lang = one_of(row["instruction_language"], LANGUAGES, where, "instruction_language")
            inter = row["Intersection_exist"]
            if not isinstance(inter, bool):
                from editlens.errors import InputError

                raise InputError(f"{where}: Intersection_exist must be true or false, got {inter!r}")
            # every other published column is kept (exported with the results); images as their references
            extra = {k: (str(v) if k == "input_image_raw" and v is not None else v) for k, v in row.items()
                     if k not in COLUMNS}
            items.append(BenchItem(f"{task}/{lang}/{key}", key, text_field(row, "instruction", where),
                                   image(row["input_image"], f"{where} input_image", base), task, lang,
                                   extra={**extra, "intersection": inter}))
        return items

    def output_candidates(self, item: BenchItem) -> list[str]:
        official = [f"fullset/{item.category}/{item.language}/{item.key}.{e}" for e in ("png", "jpg")]
        return official + super().output_candidates(item)

    def prompt_names(self) -> list[str]:
        return ["SC", "PQ"]

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        from editlens.templates.clones import find_module, module_strings

        f = find_module(clone, ["GEdit-Bench/viescore/vie_prompts.py", "viescore/vie_prompts.py", "vie_prompts.py"],
                        "--prompts-from", "Step1X-Edit's GEdit-Bench")
        s = module_strings(f, "--prompts-from")
        parts = {"SC": ("_context_no_delimit", "_prompts_0shot_two_image_edit_rule", "_prompts_0shot_tie_rule_SC"),
                 "PQ": ("_context_no_delimit", "_prompts_0shot_rule_PQ")}
        return {k: "\n".join(s[n] for n in names) for k, names in parts.items() if all(n in s for n in names)}

    def fallback_prompts(self) -> dict[str, str]:
        from editlens.judges.templates import load_template

        # editlens' own VIEScore wording (the same as the viescore judge's)
        return {"SC": load_template("viescore_sc").text, "PQ": load_template("viescore_pq").text}

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        if prompts.from_clone:
            sc = prompts.fill("SC").replace("<instruction>", item.instruction)
            pq = prompts.fill("PQ")
        else:
            sc, pq = prompts.fill("SC", instruction=item.instruction), prompts.fill("PQ")
        # the release shows SC both images and PQ the edited one, text first
        return [Question("SC", sc, ("source", "edited"), ("SC_success", "SC_overediting"), low=0, high=10),
                Question("PQ", pq, ("edited",), ("PQ_naturalness", "PQ_artifacts"), low=0, high=10)]

    def release_answer(self, q: Question, text: str | None) -> Reading:
        scores, problem, invented = viescore_scores(text)
        if scores is None:
            return Reading(None, problem, invented)
        if len(scores) == len(q.dimensions):
            return Reading(dict(zip(q.dimensions, scores)))
        # the release keeps any number of scores and takes their minimum: so do both dimensions
        return Reading({d: min(scores) for d in q.dimensions})

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        return gedit_item(dims)

    def headline(self, figures: Mapping[str, float]) -> float:
        return figures["O"]

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return gedit_table(rows, n_boot=n_boot, seed=seed)


_DELIMITER = "||V^=^V||"
_BARE_PAIR = re.compile(r"^\[\d+, ?\d+\]$")


def _repair_json(blob: str) -> str:
    """The release's last attempt at JSON (``fix_json``): quote ``word:`` keys, then wrap a bare
    number value in a list, quote any other bare value (true/false/null kept)."""
    quoted = re.sub(r"(\w+):", r'"\1":', blob)

    def value(m: re.Match[str]) -> str:
        key, v, end = m.group(1), m.group(2).strip(), m.group(3)
        if re.match(r"^-?\d+(\.\d+)?$", v):
            v = f"[{v}]"
        elif not re.match(r"^(true|false|null)$", v, re.I):
            v = f'"{v}"'
        return f"{key}: {v}{end}"

    return re.sub(r'(".*?"):(.*?)(,|})', value, quoted)


def _as_int_0_10(text: str) -> int | None:
    try:
        n = int(text)
    except ValueError:
        return None
    return n if 0 <= n <= 10 else None


def viescore_scores(text: str | None) -> tuple[list[float] | None, str | None, bool]:
    """``(scores, problem, invented)`` of a VIEScore answer as GEdit-Bench's release reads it
    (``viescore/utils.py`` ``mllm_output_to_dict`` and the minimum taken after it). ``invented`` is
    set where the release would ask again and then guess ``random.randint(0, 10)``.

    >>> viescore_scores('||V^=^V|| {"score": [7, 8], "reasoning": "ok"} ||V^=^V||')[0]
    [7.0, 8.0]
    >>> viescore_scores("[6, 0]")[0], viescore_scores(" 7")[0]
    ([6.0, 0.0], [7.0])
    >>> viescore_scores("It looks fine.")[2]
    True
    """
    if text is None:
        return None, "no answer", False
    if text == "rate_limit_exceeded":
        return None, "the release stops on a 'rate_limit_exceeded' answer", False
    obj: Any = None
    if text.count(_DELIMITER) == 2:
        body = text[text.find(_DELIMITER) + len(_DELIMITER):text.rfind(_DELIMITER)]
    else:
        start, end = text.find("{"), text.rfind("}") + 1
        if start != -1 and end != 0:
            body = text[start:end]
        else:
            lstart, lend = text.find("["), text.rfind("]") + 1
            if _BARE_PAIR.match(text[lstart:lend]):
                obj = {"score": json.loads(text[lstart:lend])}
            elif _as_int_0_10(text) is not None:
                obj = {"score": [_as_int_0_10(text)]}
            else:
                return None, "no JSON, score list or number (the release would ask again, then guess at random)", True
    if obj is None:
        blob = body.strip().replace("\n", "")
        if not blob:
            return None, "nothing between the delimiters (the release would ask again, then guess at random)", True
        try:
            obj = json.loads(blob)
            if not isinstance(obj["score"], list):
                obj["score"] = [obj["score"]]
        except Exception:  # the release repairs what json cannot read, whatever went wrong
            try:
                obj = json.loads(_repair_json(blob))
            except ValueError:
                return None, "JSON not readable even repaired (the release would ask again, then guess at random)", True
    scores = obj.get("score") if isinstance(obj, dict) else None
    if not isinstance(scores, list) or not scores or not all(
            isinstance(x, (int, float)) and math.isfinite(x) for x in scores):
        return None, f"no list of numbers under 'score' (the release's script would stop on {scores!r})", False
    return [float(x) for x in scores], None, False


def gedit_item(dims: Mapping[str, float]) -> dict[str, float]:
    """SC, PQ and O of one item from its four judged scores: the minimum of
    each answer's scores first, then the square root of the product.

    >>> gedit_item({"SC_success": 9, "SC_overediting": 4, "PQ_naturalness": 9, "PQ_artifacts": 9})
    {'SC': 4.0, 'PQ': 9.0, 'O': 6.0}
    """
    sc = float(min(dims["SC_success"], dims["SC_overediting"]))
    pq = float(min(dims["PQ_naturalness"], dims["PQ_artifacts"]))
    return {"SC": sc, "PQ": pq, "O": math.sqrt(sc * pq)}


def gedit_table(rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The release's table per model: EN/CN x full set/intersection, a row per
    task type and the unweighted average over task types."""
    models: dict[str, Any] = {}
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        secs = []
        for lang in LANGUAGES:
            for subset in ("fullset", "intersection"):
                # every item keeps its task's row; only scored ones carry values (the rest are counted)
                sel = [r for r in mine if r["language"] == lang and (subset == "fullset" or r.get("intersection"))]
                if not any(r["language"] == lang for r in mine):
                    continue
                secs.append(section(f"{lang.upper()} {subset}", sel, ("SC", "PQ", "O"), TASKS,
                                    lambda r: r["category"], overall="groups", n_boot=n_boot, seed=seed))
        models[model] = {"sections": secs, "counts": counts(mine)}
    return {"benchmark": "gedit", "title": "GEdit-Bench", "protocol": GEditBench.spec.protocols["gedit"],
            "models": models}
