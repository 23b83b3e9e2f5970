"""DICE: detect what changed between an original and an edited image, judge
each difference against the instruction, rank editing models, and evaluate
detection with COCO-style AP (Baraldi et al., 2025)."""
