"""R ``loo``'s array-level functions, without a model: ``pl.loo`` of a log-likelihood array (:mod:`.log_lik_tree`),
``pl.loo_function`` (the log-likelihood evaluated in blocks of observations), ``pl.loo_approximate_posterior``,
``pl.waic``, ``pl.elpd``, ``pl.pointwise``, ``pl.psis`` / ``pl.sis`` / ``pl.tis`` (:class:`.psis_result.PsisResult`),
``pl.psis_n_eff_values`` and ``pl.gpdfit``. One public function per module, named after it; the numerics live in
:mod:`ppl_loo.numerics.psis` and :mod:`ppl_loo.numerics.importance`, plain PSIS-LOO in :mod:`ppl_loo.workflow.loo`.
"""
