"""Confidence of a detected difference: the probability of its command token
divided by the total probability of ADD, REMOVE and EDIT at that position.

The position is checked before any probability is read: the generated
tokens are aligned with the answer text (:mod:`editlens.backends.alignment`),
and the token at the chosen step must really begin the command word. A
command split into several tokens (``RE`` + ``MOVE``) is read at its first
piece, where the three commands part ways. When the step cannot be found or
checked, the confidence is missing with the reason, never the probability of
some other token.
"""

from __future__ import annotations

from editlens.backends.alignment import word_step
from editlens.backends.types import Generation
from editlens.dice.types import COMMANDS, Difference


def assign_confidence(gen: Generation, diffs: list[Difference]) -> None:
    for d in diffs:
        if gen.steps is None:
            d.confidence, d.confidence_source = None, "unavailable: the backend returned no log-probabilities"
            continue
        j, pieces, problem = word_step(gen, d.char_offset, d.command)
        if j is None:
            d.confidence, d.confidence_source = None, f"unavailable: {problem}"
            continue
        dist = gen.candidate_distribution(j)
        if dist is None or set(dist) != set(COMMANDS):
            d.confidence, d.confidence_source = None, "unavailable: no command probabilities at this token"
            continue
        d.confidence = dist[d.command]
        d.confidence_source = "logprobs" if pieces == 1 else f"logprobs (first of {pieces} tokens)"
