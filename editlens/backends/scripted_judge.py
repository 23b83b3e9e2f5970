"""A scripted judge for pipelines: **not a real judge**.

It answers every judge and benchmark prompt of editlens in the format the
prompt asks for, with scores that are a deterministic function of the request
(a SHA-256 of the seed, the prompt's text and the images' content hashes): the
same request always gets the same answer, two edits get different ones. It
reads no image and understands nothing; it exists so that a pipeline (the
quickstart, a user's own CI) runs every step end to end — generation, judging,
tables, arenas, tuning — and produces *ranked* tables, which a tiny random
model's noise never does.

Everything it touches says so: each answer's text starts with
:data:`LABEL`, its model id and its backend description carry
:data:`MARK`, and every table, report, leaderboard and arena made from its
answers prints :data:`WARNING` (:func:`scripted_in` finds it in a run's
manifest or a table's judge record).

The format is read from the prompt itself:

* a JSON example with a ``"score": [a, b, ...]`` list: that many whole numbers
  in the scale the prompt states (``from 1 to 5``, ``0 to 10``, ``5: ...``
  ``1: ...`` levels or ``1 for yes, 0 for no``; 0-10 when it states none), as ``{"reasoning", "score"}``;
* a ``[[A>B]]`` verdict line (the pairwise judge): each of the two last pictures gets a hash of its
  pixels as its "quality", the higher wins, so both orders of a pair agree;
* ``YES or NO``: the word, with the log-probabilities of ``YES`` and ``NO``
  at the answer token (the yes/no judge reads them);
* ``Describe this picture``: a caption sentence;
* anything else: a sentence saying the format was not recognised, which the
  caller records as *unscored* with the raw text, never as a score.

Use it from any command that takes ``--vlm``: a folder made by
``editlens make-tiny-vlm DIR --scripted`` (``--vlm DIR``), or a server started
with ``editlens serve --scripted-judge SEED`` (``--vlm http://HOST:PORT/v1``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

from editlens.backends.types import ChatRequest, Generation, TokenStep, part_pixels
from editlens.core.images import image_hash

#: the marker every record of this judge carries (model id, descriptions, served model name)
MARK = "NOT-A-REAL-JUDGE"
#: the first words of every answer it gives
LABEL = "[editlens scripted judge: NOT A REAL JUDGE; scores are a hash of the request]"
#: what tables, reports, leaderboards and arenas print when their scores came from it
WARNING = ("SCRIPTED JUDGE, NOT A REAL JUDGE: every score here is a hash of the request (editlens "
           "make-tiny-vlm --scripted / serve --scripted-judge); it tests the pipeline, it judges nothing")
#: the file that makes a folder a scripted judge (written by ``editlens make-tiny-vlm --scripted``)
FOLDER_FILE = "scripted_judge.json"
MODEL_ID = f"editlens-scripted-judge-{MARK}"

_SCORE_LIST = re.compile(r'"scores?"\s*:\s*\[([^\]]*)\]')
_RANGE = re.compile(r"\bfrom\s+(-?\d+)\s+to\s+(-?\d+)\b|\b(-?\d+)\s*(?:to|-|–)\s*(-?\d+)\b", re.I)
_LEVELS = re.compile(r"(?:^|[\s;(])(\d{1,2})\s*:|\b(\d{1,2})\s+for\b", re.M)
_VERDICTS = ("[[A>B]]", "[[B>A]]", "[[A=B=Good]]", "[[A=B=Bad]]")


def scripted_in(record: Any) -> bool:
    """Whether ``record`` (a run manifest, a table's judge entry, a backend description: any JSON-like
    value) names the scripted judge anywhere.

    >>> scripted_in({"evaluators": [{"provenance": {"backend": {"model": MODEL_ID}}}]}), scripted_in({"a": "b"})
    (True, False)
    """
    if isinstance(record, str):
        return MARK in record or "NOT A REAL JUDGE" in record
    if isinstance(record, dict):
        return any(scripted_in(k) or scripted_in(v) for k, v in record.items())
    if isinstance(record, (list, tuple)):
        return any(scripted_in(v) for v in record)
    return False


def is_scripted_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder made by ``editlens make-tiny-vlm --scripted``."""
    p = Path(path).expanduser()
    return p.is_dir() and (p / FOLDER_FILE).is_file()


def write_folder(out: str | Path, seed: int = 0) -> Path:
    """A folder that ``--vlm`` loads as the scripted judge with ``seed``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / FOLDER_FILE
    path.write_text(json.dumps({"kind": "editlens-scripted-judge", "seed": int(seed), "warning": WARNING},
                               indent=2) + "\n", encoding="utf-8")
    return path


def scale_of(text: str) -> tuple[int, int]:
    """The score scale a prompt states: ``from 1 to 5`` / ``0 to 10`` / ``5: ... 1: ...`` levels (0-10 if none).

    >>> scale_of("Rate it on three scales from 1 to 5"), scale_of("5: kept; 4: small; 1: different"), scale_of("x")
    ((1, 5), (1, 5), (0, 10))
    >>> scale_of("Answer 1 for yes, 0 for no.")
    (0, 1)
    """
    for m in _RANGE.finditer(text):
        lo, hi = (int(g) for g in (m.group(1, 2) if m.group(1) is not None else m.group(3, 4)))
        if lo < hi <= 100:
            return lo, hi
    levels = sorted({int(a or b) for a, b in _LEVELS.findall(text)})
    if len(levels) >= 2:
        return levels[0], levels[-1]
    return 0, 10


class ScriptedJudgeBackend:
    """The backend (:class:`~editlens.backends.types.Backend`) of the scripted judge; see the module's text."""

    name = "scripted-judge"
    revision = None

    def __init__(self, seed: int = 0, source: str | None = None) -> None:
        self.seed = int(seed)
        self.source = source
        self.model_id = MODEL_ID

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_id, "seed": self.seed, "folder": self.source,
                "not_a_real_judge": True, "warning": WARNING}

    def _digest(self, request: ChatRequest, sample: int) -> bytes:
        h = hashlib.sha256(f"{self.seed}\0{sample}\0".encode())
        for m in request.messages:
            for p in m.parts:
                h.update((p if isinstance(p, str) else "<image " + image_hash(part_pixels(p)) + ">").encode() + b"\0")
        return h.digest()

    def answer(self, request: ChatRequest, sample: int = 0) -> Generation:
        text = "\n".join(p for m in request.messages if m.role != "assistant" for p in m.parts if isinstance(p, str))
        digest = self._digest(request, sample)
        score_list = _SCORE_LIST.findall(text)
        if "[[A>B]]" in text:
            images = request.images
            if len(images) >= 2:  # each picture its own hash "quality": the same verdict in both orders
                qa, qb = (hashlib.sha256(f"{self.seed}\0{image_hash(im)}".encode()).digest()[:4] for im in images[-2:])
                verdict = "[[A>B]]" if qa > qb else "[[B>A]]" if qb > qa else "[[A=B=Good]]"
            else:
                verdict = _VERDICTS[digest[0] % len(_VERDICTS)]
            return Generation(f"{LABEL}\n{verdict}", finish_reason="stop")
        if score_list:
            n = max(1, len([x for x in score_list[-1].split(",") if x.strip()]))
            lo, hi = scale_of(text)
            values = [lo + digest[i] % (hi - lo + 1) for i in range(n)]
            return Generation(json.dumps({"reasoning": LABEL, "score": values}), finish_reason="stop")
        if re.search(r"\byes\s+or\s+no\b", text, re.I):
            p_yes = (digest[0] + 1) / 257
            word = "YES" if p_yes >= 0.5 else "NO"
            lp = {"YES": math.log(p_yes), "NO": math.log(1 - p_yes)}
            return Generation(word, steps=[TokenStep(word, lp[word], dict(lp))], finish_reason="stop")
        if re.search(r"\bdescribe\b", text, re.I):
            return Generation(f"A picture ({LABEL}).", finish_reason="stop")
        return Generation(f"{LABEL} This prompt asks for no format the scripted judge knows; nothing is scored.",
                          finish_reason="stop")

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        out = []
        for r in requests:
            g = self.answer(r)
            if r.settings.n > 1:  # n samples: the same request, told apart by the sample index
                g.samples = [self.answer(r, k).text or "" for k in range(r.settings.n)]
            out.append(g)
        return out

    def close(self) -> None:
        pass


def load_folder(path: str | Path) -> ScriptedJudgeBackend:
    """The scripted judge a ``make-tiny-vlm --scripted`` folder describes."""
    from editlens.core.io import read_json
    from editlens.errors import ModelUnavailableError

    f = Path(path).expanduser() / FOLDER_FILE
    doc = read_json(f, "a scripted judge")
    try:
        seed = int(doc.get("seed", 0))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ModelUnavailableError(f"{f}: not a scripted judge file ({exc})") from None
    return ScriptedJudgeBackend(seed, source=str(Path(path).expanduser().resolve()))
