"""Second opinions for ``pl.loo``: estimates of ``elpd_i`` from draws independent of the posterior draws (mixture
importance sampling, :mod:`.mixture`; tempered SMC, :mod:`.smc`) and the rule that vouches for an observation when
independent estimates agree (:mod:`.rule`; ``docs/method.md``, section 6)."""
