"""Human judgments of edits inside editlens (``editlens annotate``).

* :mod:`~editlens.annotate.presets`: the point-wise scales (criteria, values, rubric text) as data;
* :mod:`~editlens.annotate.plan`: the items of a task (edits, or pairs of edits of one source) and who
  sees what (overlap k, hidden repeats, gold items; or adaptive pairs from the arena's scheduler);
* :mod:`~editlens.annotate.store`: ``DIR/votes.sqlite``, one committed transaction per vote;
* :mod:`~editlens.annotate.server`: the labelling page and its small JSON API;
* :mod:`~editlens.annotate.stats`: agreement (Krippendorff's alpha, Cohen's and Fleiss' kappa), repeats,
  gold, bootstrap CIs, flagged annotators;
* :mod:`~editlens.annotate.export`: the files meta-eval, calibrate and the arena read;
* :mod:`~editlens.annotate.interop`: Label Studio's labelling config, tasks and annotation export.
"""
