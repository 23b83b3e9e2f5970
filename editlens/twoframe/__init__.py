"""Two-frame video scoring: an edit as the 2-frame video [source, edited] in a video-text CLIP.

* :mod:`~editlens.twoframe.preprocess` - ViFi-CLIP's frame preprocessing (configurable).
* :mod:`~editlens.twoframe.layout` - original-CLIP-layout checkpoints (ViFi-CLIP ``.pth``) to transformers, every key accounted for.
* :mod:`~editlens.twoframe.model` - faithful (mean-pooled) and order-aware (temporal head) models; save/load.
* :mod:`~editlens.twoframe.scorer` - scoring with each unique image encoded once.
* :mod:`~editlens.twoframe.train` - symmetric InfoNCE retrieval training with no-op / swapped hard negatives.
* :mod:`~editlens.twoframe.retrieval` - Recall@k and ranks over a candidate pool.
* :mod:`~editlens.twoframe.calibration` - Platt scaling to a 0-1 score.
* :mod:`~editlens.twoframe.evaluator` - the registered evaluators ``twoframe`` and ``twoframe_order``.
"""
