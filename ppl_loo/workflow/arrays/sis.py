"""``pl.sis``: R ``loo``'s ``sis``."""

from __future__ import annotations

from ppl_loo.workflow.arrays.importance_sampling import importance_sampling

__all__ = ["sis"]


def sis(log_ratios, r_eff=None):
    """Standard importance sampling (the raw ratios, normalized) of each column, as R ``loo``'s ``sis``.

    Parameters
    ----------
    log_ratios : array_like, shape (S,), (S, n) or (chain, draw, n)
        Log importance ratios (finite or ``-inf``).
    r_eff : float or array_like (n,), optional
        Relative efficiency of the draws (only ``n_eff`` uses it); None: 1, as R.

    Returns
    -------
    PsisResult
        ``method="sis"``; ``pareto_k`` 0 (as R: no diagnostic) and no ``tail_len``.

    Raises
    ------
    ValueError
        Another shape, NaN or ``+inf`` values, ``r_eff`` of the wrong length or not positive.
    """
    return importance_sampling(log_ratios, r_eff, "sis")
