"""Which candidate to report for one observation, and whether another group's candidate corroborates it.

``docs/method.md``, section 4: corroboration across independently built groups of
transformations, the lowest of the confirmed group representatives, and its standard error.
"""


import jax.numpy as jnp
import numpy as np

__all__ = ["PLAIN_LIKE_TV", "AGREE_Z", "PLAIN_VOUCH_K", "select_candidate"]

#: a candidate whose weights are this close to plain PSIS's (total variation) is no independent confirmation
PLAIN_LIKE_TV = 0.1
#: two estimates agree when they differ by at most this many combined standard errors
AGREE_Z = 3.0
#: plain PSIS stands without a confirmed candidate only up to this k-hat: above 0.5 the plain weights
#: have infinite variance and their Monte Carlo SE understates the error (``docs/method.md``, section 5)
PLAIN_VOUCH_K = 0.5


def select_candidate(ok, usable, k, elpd, se, dev, group, tv):
    """The candidate to report, whether it is corroborated, and its SE (``docs/method.md``, section 4); whether that
    vouches for the observation is the verdict's to say (:func:`ppl_loo.workflow.loo.verdict.search_decision`).

    ``ok`` marks the candidates that pass every check with ``k <= k_threshold``. One of them is
    *corroborated* when a candidate of another group (``TRANSFORM_GROUP``: moment matching,
    gradient flows and the Newton step are built independently) that also passes agrees with it
    within ``AGREE_Z`` combined standard errors, neither being the plain PSIS estimate again: a
    candidate whose weights sit on the same draws as plain PSIS's (total variation ``tv`` below
    ``PLAIN_LIKE_TV``, the draw and its image together) did not move the draws, or moved them where
    they get no weight, and is no second opinion. Each group's corroborated candidate with the
    smallest estimated error ``sqrt(se^2 + dev^2)`` represents it, and the *lowest* of these
    estimates is reported: in the ground-truth suite every importance-sampling estimate whose
    proposal under-covers the LOO posterior is optimistic while its k-hat looks fine, so among
    confirmed estimates the lowest is the least affected (the lowest k instead picked the ones that
    missed). Its SE adds the spread (sd) of all corroborated estimates to its own: they pass the same
    checks, and which one is right cannot be told. Without a corroborated candidate the lowest k
    among those that pass is returned, not corroborated.
    """
    indep = ok & ~(tv < PLAIN_LIKE_TV)
    agree = jnp.abs(elpd[:, None] - elpd[None, :]) <= AGREE_Z * jnp.hypot(se[:, None], se[None, :])
    group_ids = np.unique(np.asarray(group))  # static
    group = jnp.asarray(group)
    other = group[:, None] != group[None, :]
    corroborated = indep & jnp.any(agree & other & indep[None, :], axis=1)
    any_corroborated = jnp.any(corroborated)
    err = jnp.hypot(se, dev)
    reps, rep_ok = [], []
    for g in group_ids:  # a few static groups
        in_g = corroborated & (group == g)
        reps.append(jnp.argmin(jnp.where(in_g, err, jnp.inf)))
        rep_ok.append(jnp.any(in_g))
    reps, rep_ok = jnp.stack(reps), jnp.stack(rep_ok)
    best_corroborated = reps[jnp.argmin(jnp.where(rep_ok, elpd[reps], jnp.inf))]
    n_corr = jnp.sum(corroborated)
    mean_c = jnp.sum(jnp.where(corroborated, elpd, 0.0)) / jnp.maximum(n_corr, 1)
    var_c = jnp.sum(jnp.where(corroborated, (elpd - mean_c) ** 2, 0.0)) / jnp.maximum(n_corr - 1, 1)
    by_k = jnp.argmin(jnp.where(jnp.any(ok), jnp.where(ok, k, jnp.inf), jnp.where(usable, k, jnp.inf)))
    best = jnp.where(any_corroborated, best_corroborated, by_k)
    return best, any_corroborated, jnp.where(any_corroborated, jnp.sqrt(se[best] ** 2 + var_c), se[best])
