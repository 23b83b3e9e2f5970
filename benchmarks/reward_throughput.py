"""Reward-model throughput on a random Qwen2.5-VL of realistic size
(``--size 0.5b``: Qwen2-0.5B's text model with an untied 152k-token LM head
and an 8-block, 1280-wide vision tower: 0.82 B parameters), in one run:

EditScore (a LoRA adapter merged into the base, generating SC and PQ answers)
1. batched (every edit's SC and PQ requests in one generate call) vs one
   edit at a time, greedy so both give the same answers;
2. a cached rerun (SQLite response cache) vs the first run;
3. N self-ensembling passes (``samples=N``, sampled) vs N single passes:
   the passes of a request are drawn in one call that shares its images
   (each distinct image encoded once), so N passes cost less than N x one.

EditReward (two reward heads read at ``<|Reward|>``, no generation)
4. batched vs one edit at a time (the same rewards), and a cached rerun.

The edits are what a model comparison sends: ``--sources`` source photos,
each edited by ``--models`` editors. Prompts are short benchmark templates
(the tiny BPE tokenizer of a random model spells English out in many
tokens; the released prompts would only lengthen the prefill, which a CPU
computes at the same cost batched or not).

    python -m benchmarks.reward_throughput [--size 0.5b|tiny] [--sources 2] [--models 2] [--new-tokens 48]
        [--passes 4] [--dtype auto|float32|bfloat16|both] [--profile]

``--profile`` adds, per model, the operator shares of one more batched call
under torch.profiler (after the timed calls, so the timings are not slowed).

Targets: EditScore batching >= 2x, cached reruns >= 50x (both models), N
passes < N x one pass. EditReward's batching gain is reported, not gated:
it is one forward pass (a prefill, no decoding) whose matrix products scale
with rows x tokens, as much work batched as one at a time on a CPU; batching
saves only the tower's repeated images and per-call overhead (~1.1-1.2x on
a CPU; a GPU gains from filling the chip). EditScore gains from batching
its decoding steps, each of which reads every weight once whatever the
rows; its prefill costs the same either way. Profiles and figures:
docs/reward-models.md ("Speed").
``--size tiny`` is a smoke test of the script (timings meaningless).
About 10 minutes of CPU per dtype on a 2-core machine (``--new-tokens 24``
roughly halves it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import DTYPE_HELP, run_per_dtype, source_images

SC = "<<source>>\n<<edited>>\nEdit: $instruction. Rate success and restraint 0-$scale as JSON {\"reasoning\", \"score\"}."
PQ = "<<edited>>\nRate naturalness and artifacts 0-$scale as JSON {\"reasoning\", \"score\"}."
FOLLOW = "<<source>>\n<<edited>>\nEdit: $instruction. Instruction following: <|Reward|>"
QUALITY = "<<source>>\n<<edited>>\nEdit: $instruction. Visual quality: <|Reward|>"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="0.5b", choices=["tiny", "0.5b"], help="tiny: a smoke test, no meaningful timing")
    ap.add_argument("--sources", type=int, default=2, help="source photos")
    ap.add_argument("--models", type=int, default=2, help="edited images per source (one per editor compared)")
    ap.add_argument("--new-tokens", type=int, default=48, help="EditScore answer length (tokens)")
    ap.add_argument("--passes", type=int, default=4, help="N of the self-ensembling comparison")
    ap.add_argument("--image-side", type=int, default=112, help="side of the square test images (pixels)")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one batched call per model (torch.profiler) and report the top operators' shares")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = build(root, args.size)
        sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt, root, models), check))


def build(root: Path, size: str) -> dict:
    from editlens.testing.tiny_reward import build_editreward, build_editscore, build_qwen_vl

    t = time.perf_counter()
    base = build_qwen_vl(root / "base", "qwen2_5_vl", size=size)
    _, adapter = build_editscore(root / "editscore", base=base, rank=8)
    _, ckpt = build_editreward(root / "editreward", base=base)
    for name, text in (("sc", SC), ("pq", PQ), ("follow", FOLLOW), ("quality", QUALITY)):
        (root / f"{name}.txt").write_text(text)
    return {"base": base, "adapter": adapter, "ckpt": ckpt, "build_s": round(time.perf_counter() - t, 1)}


def check(r: dict) -> tuple[bool, str]:
    es, er = r["editscore"], r["editreward"]
    ok = (es["batching_speedup"] >= 2 and es["cache_speedup"] >= 50 and es["model_calls_in_rerun"] == 0
          and es["same_answers_batched_and_single"] and es["passes_cost_vs_n_single"] < 1
          and er["cache_speedup"] >= 50 and er["same_rewards_batched_and_single"])
    return ok, (f"EditScore batching {es['batching_speedup']:.2f}x (target >= 2x), cache {es['cache_speedup']:.0f}x "
                f"(>= 50x), {r['passes']} passes cost {es['passes_cost_vs_n_single']:.2f} of {r['passes']} single passes "
                f"(< 1); EditReward batching {er['batching_speedup']:.2f}x (reported), cache {er['cache_speedup']:.0f}x "
                f"(>= 50x), same rewards batched and single: {er['same_rewards_batched_and_single']}")


def _timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _values(scores, what: str) -> list:  # type: ignore[no-untyped-def]
    """The scores' values; a failed score stops the benchmark with its reason (timings of failures mean nothing)."""
    bad = [s for s in scores if s.status == "failed"]
    if bad:
        raise SystemExit(f"{what}: {len(bad)} score(s) failed: {bad[0].reason}")
    return [s.value for s in scores]


def op_shares(fn, top: int = 8) -> dict:  # type: ignore[no-untyped-def]
    """The ``top`` operators of one ``fn()`` call by self CPU time, with their share of the call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) or 1
    return {"total_ms": round(total / 1e3, 1),
            "top": [{"op": e.key, "ms": round(e.self_cpu_time_total / 1e3, 1), "calls": e.count,
                     "share": round(e.self_cpu_time_total / total, 3)} for e in rows[:top]]}


def measure(args: argparse.Namespace, dtype: str, root: Path, models: dict) -> dict:
    from editlens.core.types import EditSample
    from editlens.metrics.registry import create_metric
    from editlens.models import pool

    pool.clear()  # each dtype loads its own models
    n_src, n_mod = args.sources, args.models
    imgs = source_images(n_src * (1 + n_mod), size=args.image_side)
    edits = [EditSample(f"s{s}m{m}", imgs[s], imgs[n_src + s * n_mod + m], f"make edit {m} on photo {s}").load()
             for s in range(n_src) for m in range(n_mod)]
    common = {"device": args.device, "dtype": dtype}
    es_opts = {**common, "model": str(models["adapter"]), "max_new_tokens": args.new_tokens,
               "templates": {"editscore_sc": str(root / "sc.txt"), "editscore_pq": str(root / "pq.txt")},
               "batch_size": len(edits)}
    greedy = create_metric("editscore", **es_opts, temperature=0.0, cache=False)
    greedy.score_batch(edits[:1])  # load and warm up
    backend = greedy.backend
    single, t_single = _timed(lambda: [greedy.score_batch([e])[0] for e in edits])
    batched, t_batched = _timed(lambda: greedy.score_batch(edits))
    _values(single + batched, "EditScore")  # unscored is fine (a random model answers noise); failed is not
    same = [s.details.get("passes") == b.details.get("passes") for s, b in zip(single, batched)]
    cached = create_metric("editscore", **es_opts, temperature=0.0, cache=str(root / f"es-{dtype}.sqlite"))
    _, t_first = _timed(lambda: cached.score_batch(edits))
    calls = backend.calls
    _, t_rerun = _timed(lambda: cached.score_batch(edits))
    rerun_calls = backend.calls - calls
    one_pass = create_metric("editscore", **es_opts, temperature=0.7, cache=False)
    _, t_one = _timed(lambda: one_pass.score_batch(edits))
    n_pass = create_metric("editscore", **es_opts, temperature=0.7, samples=args.passes, cache=False)
    stats = backend.tower_stats
    before = (stats.rows, stats.encoded)
    passes, t_n = _timed(lambda: n_pass.score_batch(edits))
    tower = (stats.rows - before[0], stats.encoded - before[1])
    editscore = {"edits": len(edits), "requests": 2 * len(edits), "single_s": round(t_single, 2),
                 "batched_s": round(t_batched, 2), "batching_speedup": t_single / t_batched,
                 "same_answers_batched_and_single": all(same), "first_run_s": round(t_first, 2),
                 "cached_rerun_s": round(t_rerun, 4), "cache_speedup": t_first / max(t_rerun, 1e-6),
                 "model_calls_in_rerun": rerun_calls, "one_pass_s": round(t_one, 2), f"{args.passes}_passes_s": round(t_n, 2),
                 "passes_cost_vs_n_single": t_n / (args.passes * t_one),
                 "tower_images_in_passes_call": {"asked": tower[0], "encoded": tower[1]},
                 "passes_recorded": passes[0].details.get("samples"), "weights": backend.weights}
    if args.profile:
        editscore["profile_batched"] = op_shares(lambda: greedy.score_batch(edits))

    er_opts = {**common, "model": str(models["ckpt"]), "image_pixels": args.image_side ** 2,
               "templates": {"editreward_following": str(root / "follow.txt"),
                             "editreward_quality": str(root / "quality.txt")}, "batch_size": len(edits)}
    er = create_metric("editreward", **er_opts, base=str(models["base"]), cache=False)
    er.score_batch(edits[:1])
    r_single, t_rs = _timed(lambda: _values([er.score_batch([e])[0] for e in edits], "EditReward one at a time"))
    r_batched, t_rb = _timed(lambda: _values(er.score_batch(edits), "EditReward batched"))
    erc = create_metric("editreward", **er_opts, base=str(models["base"]), cache=str(root / f"er-{dtype}.sqlite"))
    _, t_rf = _timed(lambda: erc.score_batch(edits))
    _, t_rr = _timed(lambda: erc.score_batch(edits))
    tol = 1e-3 if dtype == "float32" else 5e-2
    editreward = {"single_s": round(t_rs, 2), "batched_s": round(t_rb, 2), "batching_speedup": t_rs / t_rb,
                  "same_rewards_batched_and_single": all(abs(a - b) <= tol * max(1.0, abs(a)) for a, b in zip(r_single, r_batched)),
                  "max_difference": max(abs(a - b) for a, b in zip(r_single, r_batched)),
                  "first_run_s": round(t_rf, 2), "cached_rerun_s": round(t_rr, 4), "cache_speedup": t_rf / max(t_rr, 1e-6),
                  "tower": {"asked": er._loaded.tower_stats.rows, "encoded": er._loaded.tower_stats.encoded}}
    if args.profile:
        editreward["profile_batched"] = op_shares(lambda: er.score_batch(edits))
    params = sum(p.numel() for p in backend.model.parameters())
    return {"model": f"random Qwen2.5-VL ({args.size}), {params / 1e9:.2f} B parameters", "build_s": models["build_s"],
            "dtype": dtype, "new_tokens": args.new_tokens, "passes": args.passes, "image_side": args.image_side,
            "editscore": editscore, "editreward": editreward}


if __name__ == "__main__":
    main()
