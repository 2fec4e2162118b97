"""Exact cross-validation by refitting the model: ``pl.loo(..., refit=...)``'s refits (:mod:`.refit`: every refit
of one call in batched NUTS runs, or the model's own sampler one after the other, with checkpoints and Ctrl-C) and
``pl.loo_kfold`` (:mod:`.kfold`: the folds and their fits, on the same batched machinery)."""
