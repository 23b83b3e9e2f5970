"""ADIEE: automatically created edit-evaluation training data, a VLM scorer
with a ``[SCORE]`` token and an MLP decoder, its training, a fast feature
scorer, and reward uses of the scores.

Modules (one job each):

* :mod:`~editlens.adiee.config` – data-creation rules and thresholds (TOML/YAML).
* :mod:`~editlens.adiee.rules` – the score-assignment rules as pure functions.
* :mod:`~editlens.adiee.augment` – seeded augmentations of source images.
* :mod:`~editlens.adiee.data` – ``make-data``: inputs -> dataset directory.
* :mod:`~editlens.adiee.model` – the scorer (VLM + decoder) and hidden-state choice.
* :mod:`~editlens.adiee.checkpoint` – released-layout and our-layout save/load.
* :mod:`~editlens.adiee.prompts` – question/answer templates and the side-by-side image.
* :mod:`~editlens.adiee.train` – training loop (LoRA, answer-only CE + score loss).
* :mod:`~editlens.adiee.fast` – the fast feature scorer on frozen CLIP/DINOv2 embeddings.
* :mod:`~editlens.adiee.evaluator` – registered evaluators ``adiee`` and ``adiee_fast``.
* :mod:`~editlens.adiee.reward` – best-of-n, relabelling and the released pairwise rule.
* :mod:`~editlens.adiee.editor_prompt` – the reward prompt of editor fine-tuning (wording, binning).
* :mod:`~editlens.adiee.tune_data` – scored candidates per source, score-weighted target draws.
* :mod:`~editlens.adiee.tune_editor` – ``tune-editor``: reward-conditioned fine-tuning and ReFL.
"""
