"""Edit types from a judge: a VLM (text only) names the type of each instruction.

The answer must name exactly one type (or an alias); anything else is
*unscored*: the rules' type is kept and the raw answer recorded beside it,
never guessed.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from editlens.data.edit_types import EditTypes, classify_instruction, edit_types


def parse_edit_type(answer: str | None, types: EditTypes | None = None) -> str | None:
    """The one type an answer names, or ``None`` (none, or several).

    >>> parse_edit_type("Background."), parse_edit_type("add or remove"), parse_edit_type("I am not sure")
    ('background', None, None)
    """
    types = types or edit_types()
    if not answer or not answer.strip():
        return None
    words = re.findall(r"[a-z][a-z_/\-]*", answer.strip().lower())
    found = {t for w in words if (t := types.canonical(w)) is not None}
    return found.pop() if len(found) == 1 else None


def judge_edit_types(instructions: Sequence[str], backend: Any, template: Any = None,
                     types: EditTypes | None = None) -> list[dict[str, Any]]:
    """``{"edit_type", "by", "raw"}`` per instruction: the judge's type when its answer names
    one (``by="judge"``), else the rules' type (``by="rules"``, with the raw answer and why)."""
    from editlens.backends.types import ChatRequest, GenerationSettings, Message
    from editlens.judges.templates import load_template

    types = types or edit_types()
    template = template or load_template("edit_type")
    listing = "\n".join(f"- {n}: {types.descriptions.get(n, '')}" for n in types.names if n != "other")
    settings = GenerationSettings(max_new_tokens=16)
    reqs = [ChatRequest([Message("user", template.render({}, instruction=i, types=listing))], settings)
            for i in instructions]
    out = []
    for instruction, gen in zip(instructions, backend.generate(reqs) if reqs else []):
        found = parse_edit_type(gen.text, types) if gen.problem is None else None
        if found is not None:
            out.append({"edit_type": found, "by": "judge", "raw": gen.text})
        else:
            why = gen.problem or "the answer names no single edit type"
            out.append({"edit_type": classify_instruction(instruction, types), "by": "rules", "raw": gen.text,
                        "judge_problem": why})
    return out
