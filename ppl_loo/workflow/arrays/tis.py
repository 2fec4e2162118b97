"""``pl.tis``: R ``loo``'s ``tis``."""

from __future__ import annotations

from ppl_loo.workflow.arrays.importance_sampling import importance_sampling

__all__ = ["tis"]


def tis(log_ratios, r_eff=1.0):
    """Truncated importance sampling (Ionides 2008) of each column, as R ``loo``'s ``tis``: the ratios truncated at
    ``sqrt(S)`` times their mean, ``min(r_s, log mean exp(r) + log(S) / 2)``, then normalized.

    Parameters
    ----------
    log_ratios : array_like, shape (S,), (S, n) or (chain, draw, n)
        Log importance ratios (finite or ``-inf``).
    r_eff : float or array_like (n,), default 1.0
        Relative efficiency of the draws (only ``n_eff`` uses it).

    Returns
    -------
    PsisResult
        ``method="tis"``; ``pareto_k`` 0 (as R: no diagnostic) and no ``tail_len``.

    Raises
    ------
    ValueError
        Another shape, NaN or ``+inf`` values, ``r_eff`` of the wrong length or not positive.
    """
    return importance_sampling(log_ratios, r_eff, "tis")
