"""Confidence of a detected difference: the probability of its command token
divided by the total probability of ADD, REMOVE and EDIT at that position."""

from __future__ import annotations

from editlens.backends.types import Generation
from editlens.dice.types import COMMANDS, Difference


def step_at_offset(gen: Generation, offset: int) -> int | None:
    """Index of the generated token covering character ``offset`` of the text."""
    if gen.steps is None:
        return None
    pos = 0
    for j, step in enumerate(gen.steps):
        end = pos + len(step.token)
        if pos <= offset < end or (offset == pos and step.token.strip()):
            return j
        pos = end
    return None


def assign_confidence(gen: Generation, diffs: list[Difference]) -> None:
    for d in diffs:
        if gen.steps is None:
            d.confidence, d.confidence_source = None, "unavailable: the backend returned no log-probabilities"
            continue
        j = None if d.char_offset is None else step_at_offset(gen, d.char_offset)
        dist = None if j is None else gen.candidate_distribution(j)
        if dist is None or set(dist) != set(COMMANDS):
            d.confidence, d.confidence_source = None, "unavailable: no command probabilities at this token"
            continue
        d.confidence, d.confidence_source = dist[d.command], "logprobs"
