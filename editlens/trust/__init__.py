"""When can an evaluator be trusted: sanity probes (:mod:`editlens.trust.probe`,
controls in :mod:`editlens.trust.controls`) and run-to-run drift
(:mod:`editlens.trust.diff`). Calibration to human agreement lives with the
meta-evaluation (:mod:`editlens.meta.calibration`), edit types with the data
(:mod:`editlens.data.edit_types`)."""
