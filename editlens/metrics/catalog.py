"""Built-in metrics, declared as data (see :class:`~editlens.metrics.spec.MetricSpec`).

Which metrics run by default, what run-level summary an evaluator adds,
whether a judge self-ensembles, what a score measures, which boxes an
evaluator keeps and how to draw them are metadata here too (``default=``,
``summary=``, ``ensemble=``, ``measures=``, ``boxes=``, ``unchanged_at=``),
so the runner and the reports know no metric by name.
"""

from __future__ import annotations

from dataclasses import replace

from editlens.metrics.spec import BoxLayer, MetricSpec

INF = float("inf")
_P = "editlens.metrics.pixel"
_E = "editlens.metrics.embedding"
_L = "editlens.metrics.lpips"

_PAIR = ("source", "edited")
_REF = ("edited", "reference")


def _pixel(name: str, cls: str, hib: bool, rng: tuple[float, float], what: str) -> list[MetricSpec]:
    return [
        MetricSpec(name, f"{_P}:{cls}", _PAIR, hib, rng, None, f"{what}, source vs edited"),
        MetricSpec(f"{name}_ref", f"{_P}:{cls}", _REF, hib, rng, None, f"{what}, edited vs reference edit",
                   {"compare": "reference"}),
    ]


BUILTIN: list[MetricSpec] = [
    *_pixel("l1", "L1", False, (0.0, 1.0), "mean absolute pixel difference"),
    *_pixel("l2", "MSE", False, (0.0, 1.0), "mean squared pixel difference (MSE)"),
    *_pixel("psnr", "PSNR", True, (0.0, 100.0), "peak signal-to-noise ratio in dB (identical: capped at 100)"),
    *_pixel("ssim", "SSIM", True, (-1.0, 1.0), "structural similarity (scikit-image defaults)"),
    MetricSpec("lpips", f"{_L}:LPIPS", _PAIR, False, (0.0, INF), "lpips-alex",
               "LPIPS distance (AlexNet), source vs edited", {"net": "alex"}),
    MetricSpec("lpips_vgg", f"{_L}:LPIPS", _PAIR, False, (0.0, INF), "lpips-vgg",
               "LPIPS distance (VGG16), source vs edited", {"net": "vgg"}),
    MetricSpec("clip_i", f"{_E}:CLIPImage", _PAIR, True, (-1.0, 1.0), "clip",
               "CLIP image-embedding cosine, source vs edited"),
    MetricSpec("clip_i_ref", f"{_E}:CLIPImage", _REF, True, (-1.0, 1.0), "clip",
               "CLIP image-embedding cosine, edited vs reference edit", {"compare": "reference"}),
    MetricSpec("clip_t", f"{_E}:CLIPText", ("edited", "target_caption"), True, (-1.0, 1.0), "clip",
               "CLIP cosine of edited image and target caption"),
    MetricSpec("clip_d", f"{_E}:CLIPDirectional", ("source", "edited", "source_caption", "target_caption"),
               True, (-1.0, 1.0), "clip", "directional CLIP: image change vs caption change"),
    MetricSpec("clipscore", f"{_E}:CLIPScoreMetric", ("edited", "target_caption"), True, (0.0, 2.5), "clip",
               "CLIPScore (Hessel et al.): 2.5 * max(cos(edited, target caption), 0)"),
    MetricSpec("dino_i", f"{_E}:DINOImage", _PAIR, True, (-1.0, 1.0), "dino",
               "DINOv2 CLS cosine, source vs edited"),
    MetricSpec("dino_i_ref", f"{_E}:DINOImage", _REF, True, (-1.0, 1.0), "dino",
               "DINOv2 CLS cosine, edited vs reference edit", {"compare": "reference"}),
    MetricSpec("viescore", "editlens.judges.viescore:VIEScoreJudge", ("source", "edited", "instruction"), True,
               (0.0, 1.0), "vlm", "VIEScore-style VLM judge: sqrt(min(SC) * min(PQ)) / 10, reasoning kept", vlm="required"),
    MetricSpec("yes_no", "editlens.judges.yesno:YesNoJudge", ("source", "edited", "instruction"), True, (0.0, 1.0),
               "vlm", "VLM judge: P(YES) that the instruction was carried out, from token log-probabilities", vlm="required"),
    MetricSpec("pairwise", "editlens.judges.pairwise:PairwiseJudge", ("source", "edited", "instruction"), True,
               (-1.0, 1.0), "vlm", "pairwise VLM judge (editlens compare): which of two edits is better; orders=both "
               "asks A-B and B-A and reports a verdict only when they agree", {"orders": "both"}, vlm="required"),
    MetricSpec("captions", "editlens.judges.captioner:Captioner", ("source", "instruction"), True, (0.0, 0.0),
               "vlm", "VLM captioner: fills missing source/target captions for CLIP-T and CLIP-D (no score)", vlm="required"),
    MetricSpec("dice", "editlens.dice.pipeline:DiceEvaluator", ("source", "edited", "instruction"), True, (0.0, 1.0),
               None, "DICE: differences (boxes) + coherence per difference; 1 = at least one coherent change", vlm="optional"),
    MetricSpec("dice_clip_i", "editlens.dice.pipeline:DiceCLIPImage", ("source", "edited", "instruction"), True,
               (-1.0, 1.0), "clip", "CLIP-I with DICE's coherent differences patched (background preservation; needs "
               "--vlm or DICE models)", vlm="optional"),
    MetricSpec("dice_clip_t", "editlens.dice.pipeline:DiceCLIPText", ("source", "edited", "instruction", "target_caption"),
               True, (-1.0, 1.0), "clip", "CLIP-T with DICE's non-coherent differences patched (prompt adherence; needs "
               "--vlm or DICE models)", vlm="optional"),
    MetricSpec("change_map", "editlens.metrics.changemap:ChangeMapMetric", _PAIR, False, (0.0, 1.0), None,
               "model-free changed-area fraction, with changed regions (boxes) in details"),
    # two-frame video scoring (ViFi-CLIP-style; editlens/twoframe)
    MetricSpec("twoframe", "editlens.twoframe.evaluator:TwoFrameEvaluator", ("source", "edited", "instruction"), True,
               (-1.0, 1.0), "twoframe", "two-frame video CLIP: cosine of mean-pooled [source, edited] frames and the "
               "instruction (ViFi-CLIP scoring)", {"mode": "faithful"},
               availability="editlens.twoframe.evaluator:check_available"),
    MetricSpec("twoframe_order", "editlens.twoframe.evaluator:TwoFrameEvaluator", ("source", "edited", "instruction"),
               True, (-1.0, 1.0), "twoframe", "two-frame video CLIP with the order-aware temporal head "
               "(frame positions + difference token)", {"mode": "order"},
               availability="editlens.twoframe.evaluator:check_available"),
    # ADIEE (editlens.adiee): trained scorers; checkpoints via --model adiee=DIR / adiee_fast=DIR
    MetricSpec("adiee", "editlens.adiee.evaluator:AdieeEvaluator", ("source", "edited", "instruction"), True,
               (0.0, 10.0), "adiee", "ADIEE scorer: VLM with a [SCORE] token decoded by an MLP, 0-10 (cached)"),
    # learned edit reward models (editlens.rewardmodels): released checkpoints via presets or --model ROLE=DIR
    MetricSpec("editscore", "editlens.rewardmodels.editscore:EditScoreEvaluator", ("source", "edited", "instruction"),
               True, (0.0, 10.0), "editscore", "EditScore: LoRA reward model on Qwen-VL; overall 0-10 = sqrt(min(SC) "
               "x min(PQ)), sub-scores and reasoning kept; samples=N passes averaged as released",
               availability="editlens.rewardmodels.editscore:check_available"),
    MetricSpec("editreward", "editlens.rewardmodels.editreward:EditRewardEvaluator",
               ("source", "edited", "instruction"), True, (-INF, INF), "editreward",
               "EditReward: reward head on Qwen2.5-VL/MiMo-VL/Qwen3-VL; value = reward (unbounded, relative), "
               "details = log-uncertainty and a plain reading", availability="editlens.rewardmodels.editreward:check_available"),
    MetricSpec("adiee_fast", "editlens.adiee.evaluator:AdieeFastEvaluator", ("source", "edited", "instruction"), True,
               (0.0, 10.0), "adiee_fast", "fast ADIEE scorer: MLP on frozen CLIP/DINOv2 features, 0-10"),
]

# -- run metadata (the runner and the reports read these, never metric names) --
# what each score says about an edit; anything not listed measures "quality"
_MEASURES = {
    **{n: "similarity" for n in ("l1", "l2", "psnr", "ssim", "lpips", "lpips_vgg", "clip_i", "dino_i", "change_map",
                                 "dice_clip_i")},
    **{n: "reference" for n in ("l1_ref", "l2_ref", "psnr_ref", "ssim_ref", "clip_i_ref", "dino_i_ref")},
    **{n: "following" for n in ("clip_t", "clip_d", "clipscore", "yes_no", "dice", "dice_clip_t", "twoframe",
                                "twoframe_order")},
    "captions": "none",
}
#: DICE's differences, with its colour code (editlens.dice.drawing): ADD on the edited image,
#: EDIT and REMOVE on the source, the model-free detector's kind-less CHANGE on both
_DICE_BOXES = dict(
    box="box", name="DICE differences", label="{command} {object}", kind="command",
    colours={"ADD": "#e53935", "EDIT": "#22a046", "REMOVE": "#1e63d6", "CHANGE": "#f5c400"},
    legend={"ADD": "ADD (on edited)", "REMOVE": "REMOVE (on source)", "EDIT": "EDIT (on source)",
            "CHANGE": "change, kind unknown"},
    on_kind={"ADD": ("edited",), "EDIT": ("source",), "REMOVE": ("source",)}, rank="confidence",
    verdict="verdict.coherent", verdict_words=("coherent", "not coherent"), tags=("correct", "unwanted"),
    fields=("confidence", "verdict.p_yes", "verdict.reasoning", "verdict.problem"),
    empty="no visual change detected")
_DEFAULT = {"change_map": "yes", "l1": "yes", "l2": "yes", "psnr": "yes", "ssim": "yes", "lpips": "yes",
            "clip_i": "yes", "clip_t": "yes", "clip_d": "yes", "clipscore": "yes", "dino_i": "yes",
            "l1_ref": "with_reference", "l2_ref": "with_reference", "clip_i_ref": "with_reference",
            "dino_i_ref": "with_reference"}
_EXTRA: dict[str, dict] = {
    # as released: ADIEE resizes each image to 512x512 on its own, EditReward smart-resizes each from its own aspect
    # (EditScore's benchmark resizes the edit to the source: the default "source")
    "adiee": {"size_policy": "native"},
    "editreward": {"size_policy": "native"},
    # LPIPS' weights are two files (heads, backbone), not a hub id
    "lpips": {"availability": "editlens.metrics.lpips:check_available"},
    "lpips_vgg": {"availability": "editlens.metrics.lpips:check_available"},
    "viescore": {"ensemble": True},
    "yes_no": {"ensemble": True},
    "pairwise": {"ensemble": True, "orders": ("both", "forward", "reverse")},
    "dice": {"ensemble": True, "summary": "editlens.dice.ranking:ranking_summary",
             "summary_title": "DICE ranking (rates over ranked samples: parsed and fully judged)",
             "boxes": BoxLayer("differences", **_DICE_BOXES)},
    # DICE-masked CLIP keeps DICE's result under details["dice"]
    "dice_clip_i": {"ensemble": True, "boxes": BoxLayer("dice.differences", **_DICE_BOXES)},
    "dice_clip_t": {"ensemble": True, "boxes": BoxLayer("dice.differences", **_DICE_BOXES)},
    "change_map": {"unchanged_at": 0.0,
                   "boxes": BoxLayer("regions", box="box_norm", name="changed regions", label="{area_fraction:.2%} of the image",
                                     kind_labels={"GLOBAL": "whole image: {cause}"}, kind="kind", colour="#f5c400", colours={"GLOBAL": "#ff7a00"},
                                     legend={"LOCAL": "changed region", "GLOBAL": "whole image changed"},
                                     dashed=True, rank="strength",
                                     fields=("cause", "strength", "confidence"), empty="no changed region")},
}
BUILTIN = [replace(s, **({"default": _DEFAULT[s.name]} if s.name in _DEFAULT else {}),
                   measures=_MEASURES.get(s.name, "quality"), **_EXTRA.get(s.name, {}))
           for s in BUILTIN]
