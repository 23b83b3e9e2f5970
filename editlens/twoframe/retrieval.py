"""Retrieval evaluation: rank each edit's instruction among a pool.

The poster reports video-to-text Recall@1/5/10/50 and mean/median rank of the
true instruction among the test set's instructions. Both directions are
reported here; the statistics themselves come from
:func:`editlens.meta.protocols.retrieval_metrics`. Edits that share an
instruction verbatim are not counted as competitors of each other (the text
is the same candidate); ties with a wrong candidate count against the query.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.meta.protocols import ranks_from_similarity, retrieval_metrics

KS = (1, 5, 10, 50)


def pair_matrix(sim: np.ndarray, instructions: Sequence[str]) -> np.ndarray:
    """``sim[i, j]`` = similarity of video i and the instruction of edit j,
    with other edits carrying edit i's exact instruction masked to ``-inf``
    (the correct candidate is the diagonal)."""
    s = np.asarray(sim, dtype=float).copy()
    if s.ndim != 2 or s.shape[0] != s.shape[1] or s.shape[0] != len(instructions):
        raise ValueError(f"need an n x n similarity for n={len(instructions)} instructions, got shape {s.shape}")
    text = np.asarray(instructions, dtype=object)
    same = text[:, None] == text[None, :]
    np.fill_diagonal(same, False)
    s[same] = -np.inf
    return s


def retrieval_report(sim: np.ndarray, instructions: Sequence[str], ks: Sequence[int] = KS) -> dict[str, Any]:
    """Video->text and text->video Recall@k and ranks.

    >>> r = retrieval_report(np.array([[0.9, 0.1], [0.8, 0.7]]), ["a", "b"], ks=(1,))
    >>> r["video_to_text"]["recall@1"], r["text_to_video"]["median_rank"]
    (0.5, 1.0)
    """
    m = pair_matrix(sim, instructions)
    v2t = ranks_from_similarity(m)
    t2v = ranks_from_similarity(m.T)
    return {"video_to_text": retrieval_metrics(v2t, ks), "text_to_video": retrieval_metrics(t2v, ks),
            "pool": int(len(set(instructions))), "ranks_video_to_text": v2t.tolist()}


def evaluate_set(scorer: Any, data: Any, mode: str | None = None, ks: Sequence[int] = KS,
                 progress: bool = False) -> dict[str, Any]:
    """Retrieval over an :class:`~editlens.twoframe.data.EditSet` with a
    :class:`~editlens.twoframe.scorer.TwoFrameScorer`: every unique image is
    loaded and encoded once; returns the report, per-edit scores, and counts."""
    keys = data.unique_keys()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(keys), desc="frames", leave=False)
        for s in range(0, len(keys), 256):
            chunk = keys[s : s + 256]
            scorer.frame_features(chunk, lambda i, c=chunk: data.image(c[i]))
            bar.update(len(chunk))
        bar.close()
    fs = scorer.frame_features(data.source_keys, lambda i: data.image(data.source_keys[i]))
    fe = scorer.frame_features(data.edited_keys, lambda i: data.image(data.edited_keys[i]))
    video = scorer.videos(fs, fe, mode)
    text = scorer.text_features(data.instructions)
    sim = (video @ text.T).numpy()
    report = retrieval_report(sim, data.instructions, ks)
    cosine = np.clip(np.diag(sim), -1, 1).astype(np.float64)
    report["scores"] = {k: v.tolist() for k, v in scorer.model.outputs(cosine, mode).items()}
    report["n_edits"] = len(data)
    report["unique_images"] = len(keys)
    report["frames_encoded"] = scorer.frames_encoded
    report["mode"] = mode or scorer.model.mode
    return report
