"""Pairwise judge: which of two edits of the same source is better.

Position bias: a VLM shown two pictures often prefers the first (or the
second) whatever they hold. With ``orders="both"`` (the default, declared
in the ``pairwise`` spec) the judge asks twice, A-then-B (*forward*) and
B-then-A (*reverse*, its verdict mapped back to A/B), and reports:

* the shared verdict when both orders agree (``consistent: true``);
* a tie (``A=B``) when they disagree, flagged ``position_bias: true`` with
  both verdicts kept: the judge's preference followed the position, not the
  pictures;
* no verdict (unscored, raw answers kept) when either order gave none: a
  one-sided verdict cannot be checked against position bias.

``orders="forward"`` asks once, as before; ``"reverse"`` asks B-then-A only.
:func:`consistency` gives a run's consistency rate (MMRB2 asks every pair in
both orders and reports accuracy over the 2N judgements).

With ``samples`` > 1 each order's verdict is the majority over its sampled
answers that gave one (a tie between verdicts is no verdict), with the
agreement and the count of answers without a verdict. It needs ``min_samples``
answers with a verdict (default: all); a request lost to the transport (in
either order) means no verdict, with a reason that says so
(:attr:`PairVerdict.failed`: a rerun asks again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message, is_backend_failure
from editlens.core.images import ImageLike, load_image
from editlens.judges.base import VLMJudge
from editlens.judges.ensemble import majority
from editlens.judges.parsing import parse_verdict, refusal_in

#: the orders a pairwise judge can ask (``MetricSpec.orders`` of the ``pairwise`` spec)
ORDERS = ("both", "forward", "reverse")
_FLIP = {"A>B": "B>A", "B>A": "A>B", "A=B=Good": "A=B=Good", "A=B=Bad": "A=B=Bad", "A=B": "A=B"}
_LABEL = {"A>B": 1, "B>A": -1, "A=B=Good": 0, "A=B=Bad": 0, "A=B": 0}


def flip(verdict: str | None) -> str | None:
    """A verdict on (B, A) read as a verdict on (A, B).

    >>> flip("A>B"), flip("A=B=Good"), flip(None)
    ('B>A', 'A=B=Good', None)
    """
    return _FLIP.get(verdict) if verdict else None


@dataclass
class PairVerdict:
    verdict: str | None  # A>B, B>A, A=B=Good, A=B=Bad, A=B (tie by position bias); None = no verdict (raw kept)
    raw: str | list[str | None] | dict[str, Any] | None  # a dict per order where both orders were asked
    reason: str | None = None
    ensemble: dict[str, Any] = field(default_factory=dict)  # samples, agreement, votes (when samples > 1)
    #: per order asked ("forward": A shown first; "reverse": B first, its verdict already mapped to A/B):
    #: {"verdict", "raw", "reason", ["ensemble"]}; empty for a single-order verdict made before orders existed
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    consistent: bool | None = None  # both orders asked and both gave a verdict: did they agree?

    @property
    def label(self) -> int | None:
        """+1 (A better), -1 (B better), 0 (tie), None (no verdict)."""
        return _LABEL.get(self.verdict or "")

    @property
    def failed(self) -> bool:
        """No verdict because the backend failed (not the model's answer): worth retrying."""
        return self.verdict is None and is_backend_failure(self.reason)

    @property
    def position_bias(self) -> bool:
        return self.consistent is False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"verdict": self.verdict, "raw": self.raw, "reason": self.reason}
        if self.ensemble:
            d["ensemble"] = self.ensemble
        if self.orders:
            d["orders"] = self.orders
            d["consistent"] = self.consistent
            d["position_bias"] = self.position_bias
        return d


def _one(g: Any) -> tuple[str | None, str | None]:
    if g.problem:
        return None, g.problem
    v = parse_verdict(g.text)
    if v:
        return v, None
    refused = refusal_in(g.text)
    if refused:
        return None, f"model refused: {refused}"
    if g.truncated:
        return None, "answer cut off at the token limit before its [[...]] verdict"
    return None, "no [[...]] verdict in the answer"


def _verdict_of(gens: Sequence[Any], min_samples: int | None = None) -> PairVerdict:
    """One order's verdict from its answers (one, or ``samples`` of them)."""
    results = [_one(g) for g in gens]
    if len(gens) == 1:
        return PairVerdict(results[0][0], gens[0].text, results[0][1])
    votes = [v for v, _ in results]
    top, agreement, unusable = majority(votes)
    lost = [why for _, why in results if is_backend_failure(why)]
    need = len(gens) if min_samples is None else min_samples
    reason = None
    if lost:
        top, reason = None, f"{lost[0]} ({len(lost)} of {len(gens)} sampled requests lost; a rerun asks only those)"
    elif len(votes) - unusable < need:
        why = next(w for v, w in results if v is None)
        top, reason = None, (f"no sampled answer had a verdict ({why})" if unusable == len(votes) else
                             f"only {len(votes) - unusable} of {len(votes)} sampled answers had a verdict, "
                             f"{need} needed (--min-samples); first problem: {why}")
    elif top is None:
        reason = "sampled verdicts are tied"
    return PairVerdict(top, [g.text for g in gens], reason,  # type: ignore[arg-type]
                       {"samples": len(gens), "votes": votes, "agreement": agreement, "unscored_samples": unusable})


def combine_orders(forward: PairVerdict, reverse: PairVerdict) -> PairVerdict:
    """The verdict of a pair asked in both orders (``reverse`` already mapped to A/B)."""
    orders = {name: {k: v for k, v in pv.to_dict().items() if v not in (None, {})} | {"verdict": pv.verdict}
              for name, pv in (("forward", forward), ("reverse", reverse))}
    raw = {"forward": forward.raw, "reverse": reverse.raw}
    lost = next((f"{pv.reason} (in the {name} order)" for name, pv in (("forward", forward), ("reverse", reverse))
                 if pv.failed), None)
    if lost:  # the transport failed: the pair is failed, asked again on a rerun
        return PairVerdict(None, raw, lost, orders=orders, consistent=None)
    f, r = forward.verdict, reverse.verdict
    if f is None or r is None:
        missing = [name for name, pv in (("forward", forward), ("reverse", reverse)) if pv.verdict is None]
        why = "; ".join(f"{name}: {pv.reason}" for name, pv in (("forward", forward), ("reverse", reverse))
                        if pv.verdict is None)
        return PairVerdict(None, raw, f"no verdict in the {' and '.join(missing)} order ({why}); a verdict from "
                           "one order alone cannot be checked for position bias", orders=orders, consistent=None)
    if f == r:
        return PairVerdict(f, raw, None, orders=orders, consistent=True)
    if _LABEL[f] == 0 and _LABEL[r] == 0:  # A=B=Good against A=B=Bad: a tie either way
        return PairVerdict("A=B", raw, None, orders=orders, consistent=True)
    return PairVerdict("A=B", raw, f"position bias: {f} with A shown first, {r} with B shown first; reported as a tie",
                       orders=orders, consistent=False)


def consistency(verdicts: Sequence[PairVerdict]) -> dict[str, Any]:
    """Consistency of a run of two-order verdicts: the share of pairs whose
    two orders agree, over pairs where both orders gave a verdict.

    >>> a = PairVerdict("A>B", None, consistent=True); b = PairVerdict("A=B", None, consistent=False)
    >>> consistency([a, b, PairVerdict(None, None)])["rate"]
    0.5
    """
    checked = [v for v in verdicts if v.consistent is not None]
    agree = sum(1 for v in checked if v.consistent)
    return {"rate": agree / len(checked) if checked else None, "consistent": agree,
            "position_bias": len(checked) - agree, "checked": len(checked),
            "without_verdict": sum(1 for v in verdicts if v.verdict is None), "pairs": len(verdicts)}


class PairwiseJudge(VLMJudge):
    """Options: those of every judge (:class:`~editlens.judges.base.VLMJudge`) and
    ``orders``: ``both`` (ask A-then-B and B-then-A; see the module docstring),
    ``forward`` or ``reverse``."""

    template_names = ("pairwise",)

    images_per_prompt = 3  # source, edit A, edit B

    #: its **kwargs are VLMJudge's options (``--option pairwise.KEY`` typos are refused by name)
    kwargs_go_to_base = True

    def __init__(self, *args: Any, orders: str = "both", **kwargs: Any) -> None:
        if orders not in ORDERS:
            raise ValueError(f"pairwise: orders must be one of {', '.join(ORDERS)}, got {orders!r}")
        self.orders = orders
        super().__init__(*args, **kwargs)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "orders": self.orders}

    def compute(self, batch: Sequence[Any]) -> list[Any]:
        raise TypeError("a pairwise judge compares two edits: use `editlens compare` (or compare --pairs FILE), "
                        "not a per-edit run")

    def compare(self, items: Sequence[tuple[ImageLike, ImageLike, ImageLike, str]]) -> list[PairVerdict]:
        """``items``: (source, edit A, edit B, instruction) tuples."""
        t = self.templates["pairwise"]
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        asked = ["forward", "reverse"] if self.orders == "both" else [self.orders]
        reqs = []
        for src, a, b, instruction in items:
            imgs = {k: load_image(v)[0] for k, v in (("source", src), ("a", a), ("b", b))}
            for order in asked:
                first, second = ("a", "b") if order == "forward" else ("b", "a")
                shown = {"source": imgs["source"], "edited_a": imgs[first], "edited_b": imgs[second]}
                reqs.append(ChatRequest([Message("user", t.render(shown, instruction=instruction))], settings))
        answers = self.ask(reqs)
        out = []
        for i in range(len(items)):
            per = {order: _verdict_of(answers[i * len(asked) + j], self.min_samples) for j, order in enumerate(asked)}
            if "reverse" in per:
                rv = per["reverse"]
                rv.verdict = flip(rv.verdict)
                if rv.ensemble.get("votes"):
                    rv.ensemble["votes"] = [flip(v) for v in rv.ensemble["votes"]]
            if self.orders == "both":
                out.append(combine_orders(per["forward"], per["reverse"]))
            else:
                out.append(per[self.orders])
        return out
