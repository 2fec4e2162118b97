"""``pl.psis``: R ``loo``'s ``psis``."""

from __future__ import annotations

from ppl_loo.workflow.arrays.importance_sampling import importance_sampling

__all__ = ["psis"]


def psis(log_ratios, r_eff=1.0, conventions="arviz"):
    """Pareto-smoothed importance sampling of each column of log ratios, as R ``loo``'s ``psis``.

    Parameters
    ----------
    log_ratios : array_like, shape (S,), (S, n) or (chain, draw, n)
        Log importance ratios, draws along the first axis (or the first two, chain by chain); for LOO,
        ``-log_lik``. Finite or ``-inf``.
    r_eff : float or array_like (n,), default 1.0
        Relative efficiency of the draws, one value or one per column (R's ``relative_eff``,
        :func:`ppl_loo.relative_eff`): it sets the Pareto tail length and ``n_eff``.
    conventions : {"arviz", "R"}, default "arviz"
        The tail length: ``"arviz"`` ``floor(3 sqrt(S / r_eff))`` (``floor(S / 5)`` where ``S r_eff <= 225``),
        ``"R"`` R ``loo``'s ``ceiling(min(0.2 S, 3 sqrt(S / r_eff)))``; the rest is the same computation
        (:func:`ppl_loo.numerics.psis.psislw`).

    Returns
    -------
    PsisResult
        ``log_weights`` (normalized, ``(S, n)``), ``pareto_k``, ``tail_len``, ``r_eff``, ``n_eff`` and
        ``weights(log=True, normalize=True)``.

    Raises
    ------
    ValueError
        Another shape, NaN or ``+inf`` values, ``r_eff`` of the wrong length or not positive, or a tail of fewer
        than 5 draws (R leaves such a column unsmoothed with ``k = Inf``).

    Notes
    -----
    A column whose tail values are all equal gets ``pareto_k = -inf`` and its unsmoothed weights (R: ``Inf``, with
    a warning).
    """
    return importance_sampling(log_ratios, r_eff, "psis", conventions)
