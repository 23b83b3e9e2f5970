"""Learned edit reward models as evaluators, in their released formats.

* :mod:`editlens.rewardmodels.editscore` — EditScore (VectorSpaceLab): LoRA
  adapters on Qwen2.5-VL / Qwen3-VL that answer a JSON with reasoning and
  scores; evaluator ``editscore``.
* :mod:`editlens.rewardmodels.editreward` — EditReward (TIGER-AI-Lab): two
  reward heads on a fully fine-tuned Qwen2.5-VL / MiMo-VL / Qwen3-VL, read at
  the ``<|Reward|>`` token; evaluator ``editreward``.

Both load through :func:`editlens.models.loader.load_model` (kinds
``editscore`` and ``editreward``, presets under
``editlens/models/presets/editscore`` and ``.../editreward``), record the
checkpoint they ran (hub revision and weight hashes) and say in every
result whether their prompts and input format are identical to the release.
editlens ships its own prompt wording; ``prompts=PATH`` reads the authors'
wording from a local clone of their repository (parsed, never imported).
See docs/reward-models.md.
"""
