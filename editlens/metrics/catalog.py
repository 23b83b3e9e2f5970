"""Built-in metrics, each declared once, as data (see :class:`~editlens.metrics.spec.MetricSpec`).

Which metrics run by default, what run-level summary an evaluator adds,
whether a judge self-ensembles, what a score measures, which boxes an
evaluator keeps and how to draw them are fields of the one declaration
(``default=``, ``summary=``, ``ensemble=``, ``measures=``, ``boxes=``,
``unchanged_at=``), so the runner and the reports know no metric by name.
"""

from __future__ import annotations

from editlens.metrics.spec import BoxLayer, MetricSpec

INF = float("inf")
_P = "editlens.metrics.pixel"
_E = "editlens.metrics.embedding"
_L = "editlens.metrics.lpips"

_PAIR = ("source", "edited")
_REF = ("edited", "reference")
_JUDGED = ("source", "edited", "instruction")


def _pixel(name: str, cls: str, hib: bool, rng: tuple[float, float], what: str,
           ref_default: str = "with_reference") -> list[MetricSpec]:
    """A pixel metric of source vs edited (a similarity, in the default set) and its ``_ref`` twin against a
    reference edit (``ref_default``: when it joins the default set)."""
    return [
        MetricSpec(name, f"{_P}:{cls}", _PAIR, hib, rng, None, f"{what}, source vs edited",
                   default="yes", measures="similarity"),
        MetricSpec(f"{name}_ref", f"{_P}:{cls}", _REF, hib, rng, None, f"{what}, edited vs reference edit",
                   {"compare": "reference"}, default=ref_default, measures="reference"),
    ]


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


def _dice_boxes(items: str) -> BoxLayer:
    return BoxLayer(items, **_DICE_BOXES)  # type: ignore[arg-type]


BUILTIN: list[MetricSpec] = [
    *_pixel("l1", "L1", False, (0.0, 1.0), "mean absolute pixel difference"),
    *_pixel("l2", "MSE", False, (0.0, 1.0), "mean squared pixel difference (MSE)"),
    *_pixel("psnr", "PSNR", True, (0.0, 100.0), "peak signal-to-noise ratio in dB (identical: capped at 100)",
            ref_default="no"),
    *_pixel("ssim", "SSIM", True, (-1.0, 1.0), "structural similarity (scikit-image defaults)", ref_default="no"),
    MetricSpec("lpips", f"{_L}:LPIPS", _PAIR, False, (0.0, INF), "lpips-alex",
               "LPIPS distance (AlexNet), source vs edited", {"net": "alex"}, default="yes", measures="similarity",
               # LPIPS' weights are two files (heads, backbone), not a hub id
               availability="editlens.metrics.lpips:check_available"),
    MetricSpec("lpips_vgg", f"{_L}:LPIPS", _PAIR, False, (0.0, INF), "lpips-vgg",
               "LPIPS distance (VGG16), source vs edited", {"net": "vgg"}, measures="similarity",
               availability="editlens.metrics.lpips:check_available"),
    MetricSpec("clip_i", f"{_E}:CLIPImage", _PAIR, True, (-1.0, 1.0), "clip",
               "CLIP image-embedding cosine, source vs edited", default="yes", measures="similarity"),
    MetricSpec("clip_i_ref", f"{_E}:CLIPImage", _REF, True, (-1.0, 1.0), "clip",
               "CLIP image-embedding cosine, edited vs reference edit", {"compare": "reference"},
               default="with_reference", measures="reference"),
    MetricSpec("clip_t", f"{_E}:CLIPText", ("edited", "target_caption"), True, (-1.0, 1.0), "clip",
               "CLIP cosine of edited image and target caption", default="yes", measures="following"),
    MetricSpec("clip_d", f"{_E}:CLIPDirectional", ("source", "edited", "source_caption", "target_caption"),
               True, (-1.0, 1.0), "clip", "directional CLIP: image change vs caption change", default="yes",
               measures="following"),
    MetricSpec("clipscore", f"{_E}:CLIPScoreMetric", ("edited", "target_caption"), True, (0.0, 2.5), "clip",
               "CLIPScore (Hessel et al.): 2.5 * max(cos(edited, target caption), 0)", default="yes",
               measures="following"),
    MetricSpec("dino_i", f"{_E}:DINOImage", _PAIR, True, (-1.0, 1.0), "dino",
               "DINOv2 CLS cosine, source vs edited", default="yes", measures="similarity"),
    MetricSpec("dino_i_ref", f"{_E}:DINOImage", _REF, True, (-1.0, 1.0), "dino",
               "DINOv2 CLS cosine, edited vs reference edit", {"compare": "reference"},
               default="with_reference", measures="reference"),
    MetricSpec("viescore", "editlens.judges.viescore:VIEScoreJudge", _JUDGED, True, (0.0, 1.0), "vlm",
               "VIEScore-style VLM judge: sqrt(min(SC) * min(PQ)) / 10, reasoning kept", vlm="required",
               ensemble=True),
    MetricSpec("yes_no", "editlens.judges.yesno:YesNoJudge", _JUDGED, True, (0.0, 1.0), "vlm",
               "VLM judge: P(YES) that the instruction was carried out, from token log-probabilities",
               vlm="required", ensemble=True, measures="following"),
    MetricSpec("pairwise", "editlens.judges.pairwise:PairwiseJudge", _JUDGED, True, (-1.0, 1.0), "vlm",
               "pairwise VLM judge (editlens compare): which of two edits is better; orders=both asks A-B and "
               "B-A and reports a verdict only when they agree", {"orders": "both"}, vlm="required",
               ensemble=True, orders=("both", "forward", "reverse")),
    MetricSpec("captions", "editlens.judges.captioner:Captioner", ("source", "instruction"), True, (0.0, 0.0),
               "vlm", "VLM captioner: fills missing source/target captions for CLIP-T and CLIP-D (no score)",
               vlm="required", measures="none"),
    MetricSpec("dice", "editlens.dice.pipeline:DiceEvaluator", _JUDGED, True, (0.0, 1.0), None,
               "DICE: differences (boxes) + coherence per difference; 1 = at least one coherent change",
               vlm="optional", ensemble=True, measures="following", summary="editlens.dice.ranking:ranking_summary",
               summary_title="DICE ranking (rates over ranked samples: parsed and fully judged)",
               boxes=_dice_boxes("differences")),
    # DICE-masked CLIP keeps DICE's result under details["dice"]
    MetricSpec("dice_clip_i", "editlens.dice.pipeline:DiceCLIPImage", _JUDGED, True, (-1.0, 1.0), "clip",
               "CLIP-I with DICE's coherent differences patched (background preservation; needs --vlm or DICE "
               "models)", vlm="optional", ensemble=True, measures="similarity",
               boxes=_dice_boxes("dice.differences")),
    MetricSpec("dice_clip_t", "editlens.dice.pipeline:DiceCLIPText", (*_JUDGED, "target_caption"), True,
               (-1.0, 1.0), "clip", "CLIP-T with DICE's non-coherent differences patched (prompt adherence; needs "
               "--vlm or DICE models)", vlm="optional", ensemble=True, measures="following",
               boxes=_dice_boxes("dice.differences")),
    MetricSpec("change_map", "editlens.metrics.changemap:ChangeMapMetric", _PAIR, False, (0.0, 1.0), None,
               "model-free changed-area fraction, with changed regions (boxes) in details", default="yes",
               measures="similarity", unchanged_at=0.0,
               boxes=BoxLayer("regions", box="box_norm", name="changed regions", label="{area_fraction:.2%} of the image",
                              kind_labels={"GLOBAL": "whole image: {cause}"}, kind="kind", colour="#f5c400",
                              colours={"GLOBAL": "#ff7a00"},
                              legend={"LOCAL": "changed region", "GLOBAL": "whole image changed"},
                              dashed=True, rank="strength", fields=("cause", "strength", "confidence"),
                              empty="no changed region")),
    # two-frame video scoring (ViFi-CLIP-style; editlens/twoframe)
    MetricSpec("twoframe", "editlens.twoframe.evaluator:TwoFrameEvaluator", _JUDGED, True, (-1.0, 1.0), "twoframe",
               "two-frame video CLIP: cosine of mean-pooled [source, edited] frames and the instruction (ViFi-CLIP "
               "scoring)", {"mode": "faithful"}, measures="following",
               availability="editlens.twoframe.evaluator:check_available"),
    MetricSpec("twoframe_order", "editlens.twoframe.evaluator:TwoFrameEvaluator", _JUDGED, True, (-1.0, 1.0),
               "twoframe", "two-frame video CLIP with the order-aware temporal head (frame positions + difference "
               "token)", {"mode": "order"}, measures="following",
               availability="editlens.twoframe.evaluator:check_available"),
    # ADIEE (editlens.adiee): trained scorers; checkpoints via --model adiee=DIR / adiee_fast=DIR
    # size_policy native, as released: ADIEE resizes each image to 512x512 on its own, EditReward smart-resizes each
    # from its own aspect (EditScore's benchmark resizes the edit to the source: the default "source")
    MetricSpec("adiee", "editlens.adiee.evaluator:AdieeEvaluator", _JUDGED, True, (0.0, 10.0), "adiee",
               "ADIEE scorer: VLM with a [SCORE] token decoded by an MLP, 0-10 (cached)", size_policy="native"),
    # learned edit reward models (editlens.rewardmodels): released checkpoints via presets or --model ROLE=DIR
    MetricSpec("editscore", "editlens.rewardmodels.editscore:EditScoreEvaluator", _JUDGED, True, (0.0, 10.0),
               "editscore", "EditScore: LoRA reward model on Qwen-VL; overall 0-10 = sqrt(min(SC) x min(PQ)), "
               "sub-scores and reasoning kept; samples=N passes averaged as released",
               availability="editlens.rewardmodels.editscore:check_available",
               sub_scores=("prompt_following", "consistency", "perceptual_quality")),
    MetricSpec("editreward", "editlens.rewardmodels.editreward:EditRewardEvaluator", _JUDGED, True, (-INF, INF),
               "editreward", "EditReward: reward head on Qwen2.5-VL/MiMo-VL/Qwen3-VL; value = reward (unbounded, "
               "relative), details = log-uncertainty and a plain reading",
               availability="editlens.rewardmodels.editreward:check_available",
               preference="editlens.rewardmodels.editreward:prefer_scores", size_policy="native"),
    MetricSpec("adiee_fast", "editlens.adiee.evaluator:AdieeFastEvaluator", _JUDGED, True, (0.0, 10.0),
               "adiee_fast", "fast ADIEE scorer: MLP on frozen CLIP/DINOv2 features, 0-10"),
]
