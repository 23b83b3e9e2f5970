"""Issue 41: the loop from `edit` to a ranked table without workarounds, each joint run from the CLI.

The scripted judge (``make-tiny-vlm --scripted`` / ``serve --scripted-judge``) answers every judge
and benchmark prompt in its format, deterministically, and is marked as NOT a real judge everywhere."""

from __future__ import annotations

import json

import bench_files as F
import numpy as np
import pytest
from typer.testing import CliRunner

from editlens.cli.main import app

runner = CliRunner()


def _bench_items(name, root):
    from editlens.bench.registry import get

    writers = {"gedit": F.gedit, "imgedit": F.imgedit, "kris": F.kris, "rise": F.rise}
    return get(name), get(name).read(writers[name](root / name))


@pytest.mark.parametrize("name", ["gedit", "imgedit", "kris", "rise"])
def test_the_scripted_judge_answers_every_benchmark_question_readably_and_deterministically(name, tmp_path):
    from editlens.backends.scripted_judge import LABEL, ScriptedJudgeBackend
    from editlens.backends.types import ChatRequest, Message
    from editlens.bench.judge import message_parts
    from editlens.bench.prompts import load_prompts

    bench, items = _bench_items(name, tmp_path)
    prompts = load_prompts(bench, None)
    judge = ScriptedJudgeBackend(seed=3)
    seen = set()
    for it in items:
        for q in bench.questions(it, prompts):
            imgs = {r: np.full((8, 8, 3), i * 40, np.uint8) for i, r in enumerate(q.images)}
            req = ChatRequest([Message("user", message_parts(q, imgs))])
            text = judge.generate([req])[0].text
            values = bench.parse_answer(q, text, False)
            assert values is not None and len(values) == len(q.dimensions), (q.name, text)
            assert LABEL in text and judge.generate([req])[0].text == text  # labelled, deterministic
            seen.add(tuple(values))
    assert len(seen) > 1  # varied: not one constant answer


def test_the_scripted_judge_answers_the_generic_judges_in_their_formats():
    from editlens.backends.scripted_judge import ScriptedJudgeBackend
    from editlens.backends.types import ChatRequest, Message
    from editlens.judges.parsing import read_scores
    from editlens.judges.templates import load_template

    judge = ScriptedJudgeBackend()
    for name, n in (("viescore_sc", 2), ("viescore_pq", 2), ("editscore_sc", 2)):
        text = load_template(name).text.replace("$instruction", "add a hat").replace("$scale", "10")
        answer = judge.generate([ChatRequest([Message("user", [text])])])[0].text
        scores, _, problem = read_scores(answer, expected=n, low=0, high=10)
        assert scores is not None, (name, problem)
    pair = judge.generate([ChatRequest([Message("user", [load_template("pairwise").text])])])[0].text
    assert pair.splitlines()[-1] in ("[[A>B]]", "[[B>A]]", "[[A=B=Good]]", "[[A=B=Bad]]")
    yn = judge.generate([ChatRequest([Message("user", [load_template("yes_no").text])], candidates=("YES", "NO"))])[0]
    assert yn.text in ("YES", "NO") and yn.candidate_distribution(0) is not None
    odd = judge.generate([ChatRequest([Message("user", ["Tell me a story."])])])[0].text
    assert read_scores(odd)[0] is None  # no format asked: nothing that reads as a score
