"""Runs *inside a subprocess* started by ``editlens bench verify``: imports
scoring functions from the user's clone of a benchmark owner's repository and
calls them on exported judge answers. It imports nothing from editlens (the
owners' environment may be another interpreter, ``--python``) and holds no
code of the owners': every function it calls is loaded from the clone.

Usage: ``python official_driver.py TASK REQUEST.json RESULT.json``; the
request names the clone's files and carries the answers; the result is JSON.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import sys
import types
from typing import Any


def load(path: str, name: str, folder_on_path: bool = False) -> Any:
    """The module at ``path`` (its folder first on ``sys.path`` when it imports its siblings,
    as the owners run it: ``python script.py`` puts the script's folder there)."""
    if folder_on_path:
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def number(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def gedit(req: dict[str, Any]) -> dict[str, Any]:
    """GEdit-Bench: ``viescore/utils.py:mllm_output_to_dict`` reads every SC and PQ answer as
    ``VIEScore.evaluate`` does on its first try (``give_up_parsing=False``); an answer it cannot
    read is one the release would ask again and then replace with ``random.randint(0, 10)``:
    reported, left out. The per-item rows go to the release's per-task CSVs (its columns), and
    ``calculate_statistics.py:analyze_scores`` computes every figure from them."""
    notes = []
    utils = load(req["files"]["utils"], "gedit_viescore_utils")
    try:
        import megfile  # noqa: F401  (calculate_statistics imports it at the top)
    except ImportError:  # its only use there is smart_open on a local file
        stand_in = types.ModuleType("megfile")
        stand_in.smart_open = open  # type: ignore[attr-defined]
        sys.modules["megfile"] = stand_in
        notes.append("megfile is not installed: calculate_statistics.py read its CSVs through open() instead")
    stats = load(req["files"]["statistics"], "gedit_calculate_statistics")
    items: dict[str, Any] = {}
    per_model: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for it in req["items"]:
        got: dict[str, Any] = {}
        for q in ("SC", "PQ"):
            text = it["answers"].get(q)
            if text is None:
                got = {"why": f"no {q} answer"}
                break
            try:
                d = utils.mllm_output_to_dict(text, give_up_parsing=False)
            except Exception as e:  # noqa: BLE001 - the release would crash here and retry the call
                got = {"why": f"{q}: mllm_output_to_dict raised {type(e).__name__}: {e}"}
                break
            if d is False or d == "rate_limit_exceeded":
                got = {"why": f"{q}: unreadable to mllm_output_to_dict; the release asks again and then "
                              "inserts random.randint(0, 10)", "random_fallback": True}
                break
            try:
                got[q] = min(d["score"])
            except Exception as e:  # noqa: BLE001 - VIEScore.evaluate would raise and the call be retried
                got = {"why": f"{q}: min(result['score']) raised {type(e).__name__}: {e}"}
                break
        items[it["id"]] = got
        if "SC" in got and "PQ" in got:
            per_model.setdefault(it["model"], {}).setdefault(it["task"], []).append({
                "source_image": it["source_image"], "edited_image": it["edited_image"],
                "instruction": it["instruction"], "sementics_score": got["SC"], "quality_score": got["PQ"],
                "intersection_exist": it["intersection"], "instruction_language": it["language"]})
    figures: dict[str, Any] = {}
    for model in req["models"]:
        folder = os.path.join(req["workdir"], model)
        os.makedirs(folder, exist_ok=True)
        for task in stats.GROUPS:  # the release writes these columns (test_gedit_score.py)
            with open(os.path.join(folder, f"{model}_{task}_gpt_score.csv"), "w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=["source_image", "edited_image", "instruction", "sementics_score",
                                                  "quality_score", "intersection_exist", "instruction_language"])
                w.writeheader()
                w.writerows(per_model.get(model, {}).get(task, []))
        figures[model] = {}
        for lang in req["languages"]:
            sem, qua, ove, sem_i, qua_i, ove_i = stats.analyze_scores(folder, [model], language=lang)
            out = {}
            for subset, (s, q, o) in (("fullset", (sem, qua, ove)), ("intersection", (sem_i, qua_i, ove_i))):
                rows = {g: [number(s[model][g]), number(q[model][g]), number(o[model][g])] for g in stats.GROUPS}
                rows["average"] = [number(s[model]["avg_semantics"]), number(q[model]["avg_quality"]),
                                   number(o[model]["avg_overall"])]
                out[subset] = rows
            figures[model][lang] = out
    return {"items": items, "figures": figures, "notes": notes}


def lines_average(req: dict[str, Any]) -> dict[str, Any]:
    """ImgEdit: the clone script's ``extract_scores_and_average`` on every answer (per-item values)."""
    mod = load(req["files"]["script"], "imgedit_scores")
    return {"items": {k: mod.extract_scores_and_average(v) for k, v in req["answers"].items()}}


def rise_extract(req: dict[str, Any]) -> dict[str, Any]:
    """RISEBench: ``gpt_eval.py:extract`` on every answer (per-item values; the figures come from
    running gpt_eval.py itself)."""
    mod = load(req["files"]["gpt_eval"], "rise_gpt_eval", folder_on_path=True)
    out = {}
    for k, answers in req["answers"].items():
        out[k] = {q: (mod.extract(t) if isinstance(t, str) else None) for q, t in answers.items()}
    return {"items": out}


def kris(req: dict[str, Any]) -> dict[str, Any]:
    """KRIS-Bench: each judging script's extractors (``extract_*``) on every answer. The scripts
    parse the command line, build an OpenAI client and import their prompts when imported; the
    driver gives them an empty command line and a placeholder key (no request is made), and, when
    the module their prompts come from (``ReasonEdit.prompts`` in some versions) is not importable,
    the clone's ``utils/prompts.py`` under that name, or an empty stand-in (the extractors use no
    prompt)."""
    import re

    sys.argv = [sys.argv[0]]
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-editlens-verify")
    prompts = req["files"].get("prompts")
    mods = {}
    for script, path in req["files"]["scripts"].items():
        src = open(path, encoding="utf-8").read()
        for name in set(re.findall(r"^from\s+([\w.]+)\s+import\s*\(?\s*prompt_", src, re.M)):
            try:
                importlib.import_module(name)
                continue
            except ImportError:
                pass
            if prompts and os.path.isfile(prompts):
                load(prompts, name)
            else:
                stand_in = types.ModuleType(name)
                setattr(stand_in, "__getattr__", lambda attr: "")  # noqa: B010 - a module-level __getattr__
                sys.modules[name] = stand_in
            parent = name.rpartition(".")[0]
            while parent and parent not in sys.modules:
                sys.modules[parent] = types.ModuleType(parent)
                parent = parent.rpartition(".")[0]
        mods[script] = load(path, f"kris_{script}", folder_on_path=True)  # they import metrics_common
    out: dict[str, Any] = {}
    for it in req["items"]:
        mod = mods[it["script"]]
        got: dict[str, Any] = {}
        for q, fn in it["calls"].items():
            text = it["answers"].get(q)
            if text is None:
                continue
            kwargs: dict[str, Any] = {}
            if isinstance(fn, list):  # [function, keywords the script passes it]
                fn, kwargs = fn
            res = getattr(mod, fn)(text, **kwargs)
            if isinstance(res, tuple):  # (score, reasoning)
                res = res[0]
            elif isinstance(res, dict):  # the instruction + knowledge answer
                res = {k: res.get(k) for k in ("instruction_score", "knowledge_score")}
            got[q] = res
        out[it["id"]] = got
    return {"items": out}


def pixel_distance(req: dict[str, Any]) -> dict[str, Any]:
    """MagicBrush ``evaluation/image_eval.py`` (also the Emu Edit L1 check): its own file-pairing
    functions (``get_all_turn_imgs`` for the all-turn setting, ``get_final_turn_img`` for the final
    turn) on each exported session folder against the ground-truth folder, and its ``eval_distance``
    (L1/L2) on the pairs of each table row and on all of them. ``iterative`` pairs the editor's
    ``iter_N`` edits with output N (the release defines no all-turn figure for them: its
    ``eval_distance`` on those pairs). The script imports torchvision, clip and pyiqa at its top: a
    missing one is reported by name (exit status 3)."""
    try:
        mod = load(req["files"]["script"], "magicbrush_image_eval")
    except ModuleNotFoundError as e:
        print(f"editlens-missing-module: {e.name}", file=sys.stderr)
        raise SystemExit(3) from None
    rows_of = req.get("rows") or {}
    figures: dict[str, Any] = {}
    notes: list[str] = []
    for model, gen_root in req["models"].items():
        figures[model] = {}
        ids = sorted(d for d in os.listdir(gen_root) if os.path.isdir(os.path.join(gen_root, d)))
        for setting in req["settings"]:
            groups: dict[str, list[tuple[str, str]]] = {}
            every: list[tuple[str, str]] = []
            for img_id in ids:
                gen_dir, gt_dir = os.path.join(gen_root, img_id), os.path.join(req["gt"], img_id)
                gts = mod.get_all_turn_imgs(gt_dir, "gt")
                if setting == "final_turn":
                    pairs = [(mod.get_final_turn_img(gen_dir, "generated"), mod.get_final_turn_img(gt_dir, "gt"))]
                    labels = [f"turn {len(gts)}"]
                else:
                    if setting == "iterative":
                        names = [n for n in os.listdir(gen_dir) if ("_1" in n or "iter_" in n) and "mask" not in n
                                 and (".png" in n or ".jpg" in n)]
                        gens = sorted((os.path.join(gen_dir, n) for n in names),
                                      key=lambda x: int("".join(filter(str.isdigit, x))))
                    else:
                        gens = mod.get_all_turn_imgs(gen_dir, "generated")
                    if len(gens) != len(gts):  # the release's load_data refuses such a session
                        notes.append(f"{model} {img_id}: {len(gens)} edits for {len(gts)} ground-truth turns: "
                                     "left out (the release's load_data stops on it)")
                        continue
                    pairs = list(zip(gens, gts))
                    labels = [f"turn {k + 1}" for k in range(len(pairs))]
                for label, pair in zip(labels, pairs):
                    groups.setdefault(rows_of.get(img_id, label), []).append(pair)
                    every.append(pair)
            out: dict[str, dict[str, float]] = {}
            for label, pairs in list(groups.items()) + [("overall", every)]:
                if pairs:
                    out[label] = {m: mod.eval_distance(pairs, m) for m in req["metrics"]}
            figures[model][setting] = out
    return {"figures": figures, "notes": notes}


TASKS = {"gedit": gedit, "lines_average": lines_average, "rise_extract": rise_extract, "kris": kris,
         "pixel_distance": pixel_distance}

if __name__ == "__main__":
    task, request, result = sys.argv[1:4]
    with open(request, encoding="utf-8") as f:
        req = json.load(f)
    res = TASKS[task](req)
    with open(result, "w", encoding="utf-8") as f:
        json.dump(res, f, default=str)
