"""ImgEdit-Bench (PKU-YuanGroup): the single-turn suite (9 edit types, three
1-5 scores per edit) and the UGE suite (hard edits, one 1-5 score).

Protocol (the release's ``step1_get_avgscore.py``, ``step2_typescore.py``,
``UGE/get_average_score.py``): per edit the mean of the scores its answer
lists (rounded to 2 decimals as the release does); per edit type the mean
over its edits (again rounded); the overall figure is the unweighted mean of
the type means as printed (rounded), itself rounded to 2 decimals (the
paper's "Overall" column); UGE: the mean over edits, rounded to 2 decimals
as the release prints it. ``--answers release`` reads answers as the
release's ``extract_scores_and_average`` (:func:`release_lines`).
The release's multi-turn suite is judged by people and has no protocol here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, ImageSending, Question, Reading, one_of
from editlens.bench.published import find_file, read_json
from editlens.bench.registry import register
from editlens.bench.table import counts, section
from editlens.errors import InputError

TYPES = ("add", "adjust", "extract", "replace", "remove", "background", "style", "compose", "action")
_LINE = re.compile(r"^\s*[*#\-\s]*([A-Za-z][A-Za-z &/'-]*?)\s*[*]*\s*:\s*[*]*\s*([1-5])\s*[*]*\s*$", re.M)
HOMEPAGE = "https://github.com/PKU-YuanGroup/ImgEdit/tree/main/Benchmark"
DOWNLOAD = ("hf download sysuyy/ImgEdit Benchmark.tar --repo-type dataset --local-dir ImgEdit && "
            "tar -xf ImgEdit/Benchmark.tar -C ImgEdit")


def _images_root(json_file: Path, first_id: str) -> Path:
    """The folder the JSON's ``id`` paths are relative to: beside the JSON or one level down."""
    cands = [json_file.parent] + sorted(p for p in json_file.parent.iterdir() if p.is_dir())
    for c in cands:
        if (c / first_id).is_file():
            return c
    raise InputError(f"{json_file}: its first image {first_id!r} is not under {json_file.parent} or a folder in it "
                     "(unpack the benchmark's images beside the JSON)")


def read_edit_json(path: str | Path, name: str, with_type: bool) -> tuple[Path, list[Any], Path]:
    """The rows of ImgEdit's ``{key: {id, prompt, edit_type}}`` (read by the one manifest
    reader: ``key`` becomes a column) and the folder its ``id`` paths are relative to."""
    from editlens.data.tables import read_rows

    f = find_file(Path(path), name, "ImgEdit-Bench's edit JSON")
    rows = read_rows(f).rows
    first = rows[0].values if rows else None
    if not isinstance(first, dict) or not isinstance(first.get("id"), str) or "key" not in first:
        raise InputError(f"{f}: expected {{key: {{id, prompt{', edit_type' if with_type else ''}}}}}")
    return f, rows, _images_root(f, first["id"])


def parse_lines(text: str | None, expected: int) -> list[float] | None:
    """Scores written one per line as ``Name: N`` (N in 1-5), the release's answer
    format; the release averages whatever lines it finds, editlens needs exactly
    ``expected`` of them (fewer or more is an unreadable answer, not a lower score).

    >>> parse_lines("Brief reasoning: ok\\nPrompt Compliance: 4\\nVisual Naturalness: 5\\nPhysical & Detail Coherence: 3", 3)
    [4.0, 5.0, 3.0]
    >>> parse_lines("Prompt Compliance: 4", 3) is None
    True
    """
    if not text:
        return None
    found = [float(m.group(2)) for m in _LINE.finditer(text)]
    return found if len(found) == expected else None


def release_lines(text: str | None) -> list[int] | None:
    """The scores of an answer as the release's ``extract_scores_and_average`` finds them: every
    line that, stripped, splits on ``': '`` into exactly two parts whose second is all digits (any
    count, no range); ``None`` when it finds none (the release then leaves the edit out).

    >>> release_lines("Prompt Compliance: 4\\nVisual Naturalness: 5")
    [4, 5]
    >>> release_lines("**Prompt Compliance:** 4\\n**Visual Naturalness:** 5") is None
    True
    """
    found = []
    for line in (text or "").splitlines():
        parts = line.strip().split(": ")
        if len(parts) == 2 and parts[1].isdigit():
            try:
                found.append(int(parts[1]))
            except ValueError:  # a digit int() refuses (e.g. a superscript): the release would stop
                return None
    return found or None


IMGEDIT_ANSWERS = {
    "release": "the release's extract_scores_and_average: every 'Name: N' line that splits on ': ' into two parts, "
               "N all digits, any number of them and no range check, averaged (2 decimals); markdown-bold "
               "'**Name:** N' lines are not read, and an answer with no such line leaves the edit out (unscored)",
    "strict": "exactly the expected number of 'Name: N' lines (N 1-5; markdown bold around the name or the number "
              "read), anything else unscored",
}


@register
class ImgEditBench(Benchmark):
    spec = BenchSpec(
        name="imgedit",
        title="ImgEdit-Bench (single-turn)",
        homepage=HOMEPAGE,
        download=DOWNLOAD,
        layout="Benchmark/singleturn: basic_edit.json {key: {id: 'animal/000342021.jpg', prompt, edit_type}} and "
               "the source images under the paths in 'id'",
        columns={"key": "item id (names the output file)", "id": "source image path", "prompt": "instruction",
                 "edit_type": "category (9)"},
        categories=TYPES, languages=("en",),
        protocols={"imgedit": "per edit the mean of its three 1-5 scores (2 decimals), per type the mean "
                   "(2 decimals), overall the unweighted mean of the printed type means (2 decimals)"},
        table_layout={"sections": ["single-turn"], "rows": list(TYPES) + ["overall"], "columns": ["score"],
                      "rank_by": {"figure": "score"}},
        outputs="DIR/<model>/<key>.png",
        dimensions={"score1": "1-5 (instruction adherence)", "score2": "1-5 (editing quality)",
                    "score3": "1-5 (detail preservation)"},
        prompts_in_clone="Benchmark/Basic/prompts.json (one prompt per edit type, '<edit_prompt>' placeholder)",
        identical="layout (key.png outputs, sources under the 'id' paths), one prompt per edit type with the "
                  "instruction in it, text then source then edited image, per-edit mean and per-type mean rounded "
                  "to 2 decimals as the release's scripts",
        differs="--answers strict: an answer without exactly three 'Name: N' lines is missing (the release averages "
                "whatever lines it finds); CIs added; overall = mean of the printed (rounded) type means, 2 "
                "decimals (the release's scripts print only per-type means)",
        release_images=ImageSending(encoding="file", sizes="native", mime="image/png"),
        answer_policies=IMGEDIT_ANSWERS,
    )
    json_name = "basic_edit.json"

    def read(self, path: str | Path) -> list[BenchItem]:
        f, rows, root = read_edit_json(path, self.json_name, True)
        items = []
        for r in rows:
            e, where = r.values, r.where
            if e is None:
                raise InputError(f"{where}: {r.error}")
            key = e["key"]
            if not all(isinstance(e.get(k), str) and e.get(k) for k in ("id", "prompt")):
                raise InputError(f"{where}: needs 'id' and 'prompt'")
            cat = one_of(e.get("edit_type"), TYPES, where, "edit_type") if self.json_name == "basic_edit.json" else "uge"
            src = root / e["id"]
            if not src.is_file():
                raise InputError(f"{where}: source image {e['id']!r} not found under {root}")
            items.append(BenchItem(str(key), str(key), e["prompt"].strip(), src, cat, "en",
                                   extra={"source_id": e["id"]}))
        return items

    def prompt_names(self) -> list[str]:
        return list(TYPES)

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        f = clone if clone.is_file() else clone / "Benchmark" / "Basic" / "prompts.json"
        data = read_json(f)
        if not isinstance(data, dict):
            raise InputError(f"{f}: expected {{edit_type: prompt}}")
        return {k: v for k, v in data.items() if isinstance(v, str)}

    def fallback_prompts(self) -> dict[str, str]:
        from editlens.judges.templates import load_template

        text = load_template("bench_imgedit").text
        return {t: text for t in TYPES}

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        if prompts.from_clone:
            text = prompts.fill(item.category).replace("<edit_prompt>", item.instruction)
        else:
            text = prompts.fill(item.category, instruction=item.instruction, edit_type=item.category)
        return [Question("judge", text, ("source", "edited"), ("score1", "score2", "score3"))]

    def parse_answer(self, q: Question, text: str | None, from_clone: bool) -> list[float] | None:
        if from_clone:
            return parse_lines(text, len(q.dimensions))
        return super().parse_answer(q, text, from_clone)

    def release_answer(self, q: Question, text: str | None) -> Reading:
        found = release_lines(text)
        if found is None:
            return Reading(None, "no 'Name: N' line the release reads (it leaves the edit out)")
        names = list(q.dimensions) + [f"score{k + 1}" for k in range(len(q.dimensions), len(found))]
        return Reading({n: float(v) for n, v in zip(names, found)})

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        return {"score": round(sum(dims.values()) / len(dims), 2)}

    def headline(self, figures: Mapping[str, float]) -> float:
        return figures["score"]

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        models = {}
        for model in sorted({r["model"] for r in rows}):
            mine = [r for r in rows if r["model"] == model]
            sec = section(self.spec.table_layout["sections"][0], mine,
                          ("score",), self.spec.categories, lambda r: r["category"],
                          overall="groups" if self.json_name == "basic_edit.json" else "items",
                          n_boot=n_boot, seed=seed)
            for r in sec["rows"]:  # the release rounds each type's mean to 2 decimals
                c = r["cells"]["score"]
                c["value"] = None if c["value"] is None else round(c["value"], 2)
            over = sec["overall"]["cells"]["score"]
            if self.json_name == "basic_edit.json":  # the mean of the type rows as printed (rounded), 2 decimals
                printed = [r["cells"]["score"]["value"] for r in sec["rows"] if r["cells"]["score"]["value"] is not None]
                over["value"] = round(sum(printed) / len(printed), 2) if printed else None
                sec["overall_rule"] = "unweighted mean of the type rows as printed (2 decimals), rounded to 2 decimals"
            elif over["value"] is not None:  # UGE: the release prints the mean over edits rounded to 2 decimals
                over["value"] = round(over["value"], 2)
                sec["overall_rule"] = "mean over all edits, rounded to 2 decimals (as the release prints it)"
            models[model] = {"sections": [sec], "counts": counts(mine)}
        return {"benchmark": self.spec.name, "title": self.spec.title, "protocol": next(iter(self.spec.protocols.values())),
                "models": models}


@register
class ImgEditUGE(ImgEditBench):
    spec = BenchSpec(
        name="imgedit-uge",
        title="ImgEdit-Bench (UGE: understanding-grounding-editing)",
        homepage=HOMEPAGE,
        download=DOWNLOAD,
        layout="Benchmark/hard: UGE_edit.json {key: {id: '000029784.jpg', prompt}} and the source images",
        columns={"key": "item id (names the output file)", "id": "source image path", "prompt": "instruction"},
        categories=("uge",), languages=("en",),
        protocols={"imgedit-uge": "per edit the mean of the scores its answer lists (2 decimals); overall the mean "
                   "over edits (2 decimals)"},
        table_layout={"sections": ["UGE"], "rows": ["overall"], "columns": ["score"], "rank_by": {"figure": "score"}},
        outputs="DIR/<model>/<key>.png",
        dimensions={"score": "1-5"},
        prompts_in_clone="Benchmark/UGE/UGE_bench.py (its module-level 'prompt' string, '<edit_prompt>' placeholder)",
        identical="layout, prompt with the instruction in it, text then source then edited image, per-edit mean "
                  "and the mean over edits rounded to 2 decimals",
        differs="--answers strict: an answer without exactly one 'Name: N' line is missing; CIs added",
        release_images=ImageSending(encoding="file", sizes="native", mime="image/png"),
        answer_policies=IMGEDIT_ANSWERS,
    )
    json_name = "UGE_edit.json"

    def prompt_names(self) -> list[str]:
        return ["uge"]

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        from editlens.templates.clones import find_module, module_strings

        f = find_module(clone, ["Benchmark/UGE/UGE_bench.py", "UGE_bench.py"], "--prompts-from", "ImgEdit")
        s = module_strings(f, "--prompts-from")
        return {"uge": s["prompt"]} if "prompt" in s else {}

    def fallback_prompts(self) -> dict[str, str]:
        from editlens.judges.templates import load_template

        return {"uge": load_template("bench_imgedit_uge").text}

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        if prompts.from_clone:
            text = prompts.fill("uge").replace("<edit_prompt>", item.instruction)
        else:
            text = prompts.fill("uge", instruction=item.instruction)
        return [Question("judge", text, ("source", "edited"), ("score",))]
