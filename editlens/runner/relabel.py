"""Reward relabelling: an evaluator's score of every edit of a training manifest, mapped to 1-5, written
next to it (reward-conditioned fine-tuning, ADIEE §3.4): ``editlens reward relabel`` and Python."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from editlens.errors import InputError


@dataclass
class Relabelled:
    """What :func:`relabel` wrote: the manifest ``target``, its rows, how many were scored, and how the
    scores were mapped to 1-5 (``scale``)."""

    target: Path
    rows: list[dict[str, Any]]
    relabelled: int
    unscored: int
    scale: str


def relabel(manifest: str | Path, metric: str = "adiee", *, models: Mapping[str, str] | None = None,
            options: Mapping[str, Mapping[str, Any]] | None = None, device: str = "auto", dtype: str = "auto",
            batch_size: int = 8, out: str | Path | None = None) -> Relabelled:
    """Score every edit of ``manifest`` with ``metric`` and write it with ``reward`` (1-5), ``reward_raw``
    and ``instruction_with_reward`` to ``out`` (default ``MANIFEST.reward.jsonl``); an edit without a score
    keeps its status and reason, with ``reward`` None. A bounded score maps its range to 1-5; an unbounded
    one (EditReward) this manifest's own min-max, said in ``reward_scale``."""
    from editlens.adiee.reward import to_reward_scale
    from editlens.core.io import atomic_write, read_jsonl
    from editlens.data.manifest import read_manifest
    from editlens.runner.best_of_n import score_manifest

    manifest = Path(manifest)
    samples, scores, m = score_manifest(manifest, metric, models=models, options=options, device=device, dtype=dtype,
                                        batch_size=batch_size)
    low, high = m.spec.value_range
    scale_note = f"[{low:g}, {high:g}] -> 1-5"
    if not (math.isfinite(low) and math.isfinite(high)):
        # an unbounded reward (EditReward) is relative: map this manifest's own range to 1-5, and say so
        got = [sc.value for sc in scores if sc.status == "scored" and sc.value is not None]
        if len(set(got)) < 2:
            raise InputError(f"{metric} has no fixed range and fewer than two distinct scores here, so there is "
                             "nothing to map to 1-5")
        low, high = min(got), max(got)
        scale_note = f"min-max of this manifest's {metric} scores [{low:.4g}, {high:.4g}] -> 1-5 (relative)"
    by_id = {str(r.get("id")): r for r in read_jsonl(manifest)} if manifest.suffix == ".jsonl" else {}
    rows, unscored = [], 0
    for s, sc in zip(samples, scores):
        row = dict(by_id.get(s.id) or {"id": s.id, "source": str(s.source), "edited": str(s.edited),
                                        "instruction": s.instruction})
        if sc.status == "scored" and sc.value is not None:
            r = to_reward_scale(sc.value if m.spec.higher_is_better else high - (sc.value - low), low, high)
            row.update({"reward": round(r, 4), "reward_raw": sc.value, "reward_metric": metric,
                        "reward_scale": scale_note,
                        "instruction_with_reward": f"{s.instruction.rstrip()} The image quality is {round(r)} out of five."})
        else:
            unscored += 1
            row.update({"reward": None, "reward_metric": metric, "reward_status": sc.status, "reward_reason": sc.reason})
        rows.append(row)
    target = Path(out) if out else manifest.with_suffix(".reward.jsonl")
    atomic_write(target, lambda fh: fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    read_manifest(target, check_files=False)  # the output is itself a valid manifest
    return Relabelled(target, rows, len(rows) - unscored, unscored, scale_note)
