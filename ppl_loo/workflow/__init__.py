"""The workflow layer: the entry points users call, one subpackage each, over the model adapters and numerics.

- :mod:`.loo`: ``pl.loo`` (with its second opinions, :mod:`.loo.vouch`), ``pl.add_loo``, ``LooResult``;
- :mod:`.subsample`: ``pl.loo_subsample``;
- :mod:`.approx`: ``pl.laplace``, ``pl.laplace_predictive``, ``pl.qnvb``;
- :mod:`.pvi`: ``pl.pvi``, ``pl.predictive_scores``;
- :mod:`.report`: ``pl.report``;
- :mod:`.arrays`: R ``loo``'s array-level functions (``pl.waic``, ``pl.psis``, ``pl.loo_function``, ...);
- :mod:`.downstream`: ``pl.compare``, ``pl.loo_expectations``, ``pl.loo_roc``.
"""
