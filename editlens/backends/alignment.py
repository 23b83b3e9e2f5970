"""Where each generated token sits in the answer text.

Per-token decodes do not always concatenate to the full decode (SentencePiece
drops or adds spaces, tokenisers clean up spacing). Tokens are aligned to the
text by their non-space characters; when even that fails (a token that is half
of a UTF-8 character decodes to a replacement mark), there is no alignment and
callers must treat token-level figures as missing, never read them from some
other token.
"""

from __future__ import annotations

from editlens.backends.types import Generation


def token_spans(gen: Generation) -> list[tuple[int, int]] | None:
    """``(start, end)`` in ``gen.text`` of each step's token (spaces around a
    token's characters excluded; a token of only spaces has an empty span at
    the current position), or ``None`` when the tokens cannot be aligned.

    >>> from editlens.backends.types import TokenStep
    >>> g = Generation("ADD: a cat", [TokenStep(t, None) for t in ("ADD", ":", "a", "cat")])
    >>> token_spans(g)
    [(0, 3), (3, 4), (5, 6), (7, 10)]
    """
    if gen.steps is None or gen.text is None:
        return None
    text = gen.text
    toks = [s.token for s in gen.steps]
    if "".join(toks) == text:
        spans, pos = [], 0
        for t in toks:
            core = t.strip()
            lead = len(t) - len(t.lstrip())
            start = pos + lead if core else pos + len(t)
            spans.append((start, start + len(core)))
            pos += len(t)
        return spans
    chars = [(i, ch) for i, ch in enumerate(text) if not ch.isspace()]
    spans, k = [], 0
    for t in toks:
        visible = [c for c in t if not c.isspace()]
        if not visible:
            at = chars[k][0] if k < len(chars) else len(text)
            spans.append((at, at))
            continue
        if k + len(visible) > len(chars) or any(chars[k + n][1] != c for n, c in enumerate(visible)):
            return None
        spans.append((chars[k][0], chars[k + len(visible) - 1][0] + 1))
        k += len(visible)
    return spans if k == len(chars) else None


def step_covering(spans: list[tuple[int, int]], offset: int) -> int | None:
    """Index of the token whose span holds character ``offset``."""
    for j, (a, b) in enumerate(spans):
        if a <= offset < b:
            return j
    return None


def word_step(gen: Generation, offset: int | None, word: str) -> tuple[int | None, int, str | None]:
    """The step where ``word`` (found at ``offset`` of the text) begins, checked.

    Returns ``(step, pieces, None)`` when the token at that step really starts
    ``word`` (``pieces``: how many tokens the word spans), else
    ``(None, 0, reason)``.
    """
    if gen.steps is None:
        return None, 0, "the backend returned no log-probabilities"
    if offset is None:
        return None, 0, "the word's position in the answer is unknown"
    spans = token_spans(gen)
    if spans is None:
        return None, 0, "the per-token decodes do not align with the answer text"
    j = step_covering(spans, offset)
    if j is None:
        return None, 0, f"no token covers character {offset}"
    text = gen.text or ""
    if spans[j][0] != offset:
        return None, 0, f"the token at that step is {gen.steps[j].token!r}, which does not start with {word!r}"
    end = offset + len(word)
    if text[offset:end].upper() != word.upper():
        return None, 0, f"the answer has {text[offset:end]!r} where {word!r} was expected"
    k = j
    while k < len(spans) and spans[k][1] < end:
        k += 1
    if k >= len(spans):
        return None, 0, f"the tokens end before {word!r} does"
    # the last piece may run on past the word only into punctuation ("ADD:"), not into letters ("ADDED")
    tail = text[end : spans[k][1]]
    if tail and tail[0].isalnum():
        return None, 0, f"the token {gen.steps[k].token!r} runs past {word!r} into another word"
    return j, k - j + 1, None
