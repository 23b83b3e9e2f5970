"""Training data for DICE: stage-1 pairs of similar real images
(:mod:`editlens.dice.data.pairs`) and stage-2 synthetic edits
(:mod:`editlens.dice.data.edits`), both written as resumable dataset folders
(:mod:`editlens.dice.data.store`)."""
