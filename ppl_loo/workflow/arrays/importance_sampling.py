"""The computation behind ``pl.psis``, ``pl.sis`` and ``pl.tis`` (R ``loo``'s ``importance_sampling``)."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.importance import is_n_eff, normalize_log_weights, psis_norm_const_log, tis_log_weights
from ppl_loo.numerics.psis import check_conventions, psis_tail_length, psislw
from ppl_loo.workflow.arrays.psis_result import PsisResult

__all__ = ["importance_sampling"]


def _log_ratio_matrix(log_ratios):
    """``(S, n)`` float64 of ``(S,)``, ``(S, n)`` or ``(chain, draw, n)`` log ratios, checked."""
    try:
        x = np.asarray(getattr(log_ratios, "values", log_ratios), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"log_ratios: give an array of numbers (S,), (S, n) or (chain, draw, n); got "
                        f"{type(log_ratios).__name__}.") from err
    if x.ndim == 1:
        x = x[:, None]
    elif x.ndim == 3:
        x = x.reshape(x.shape[0] * x.shape[1], x.shape[2])
    elif x.ndim != 2:
        raise ValueError(f"log_ratios has shape {x.shape}: give (S,) for one column, (S, n), or (chain, draw, n) "
                         "(the draws of each chain in turn).")
    bad = np.isnan(x) | (x == np.inf)
    if bad.any():
        raise ValueError(f"log_ratios has {int(bad.sum())} NaN or +inf value(s) (first in column "
                         f"{int(np.flatnonzero(bad.any(axis=0))[0])}): every value must be finite or -inf (a weight "
                         "of 0). Recompute the log ratios.")
    if x.shape[0] < 2 or x.shape[1] < 1:
        raise ValueError(f"log_ratios has shape {x.shape} (draws, columns): give at least 2 draws and one column.")
    return x


def _r_eff_vector(r_eff, n):
    """``r_eff`` as ``(n,)`` positive finite values (None: ones)."""
    if r_eff is None:
        return np.ones(n)
    try:
        values = np.asarray(getattr(r_eff, "values", r_eff), dtype=np.float64).ravel()
    except (TypeError, ValueError) as err:
        raise TypeError(f"r_eff={r_eff!r}: give one positive number or one per column of log_ratios.") from err
    if values.size == 1:
        values = np.full(n, values[0])
    if values.size != n:
        raise ValueError(f"r_eff has {values.size} values and log_ratios has {n} columns: give one relative "
                         "efficiency, or one per column.")
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(f"r_eff must be positive and finite (got {values[~(np.isfinite(values) & (values > 0))][:3]}):"
                         " give 1 where the relative efficiency is not defined (a constant column).")
    return values


@uses_x64
def importance_sampling(log_ratios, r_eff=None, method="psis", conventions="arviz"):
    """:class:`PsisResult` of ``method`` (``"psis"``, ``"sis"`` or ``"tis"``) on the columns of ``log_ratios``
    ``(S,)``, ``(S, n)`` or ``(chain, draw, n)``; ``r_eff`` one value or one per column (None: 1), ``conventions``
    the PSIS tail length's rounding (:func:`~ppl_loo.numerics.psis.psislw`)."""
    x = _log_ratio_matrix(log_ratios)
    S, n = x.shape
    r_eff = _r_eff_vector(r_eff, n)
    conventions = check_conventions(conventions)
    tail_len = None
    if method == "psis":
        tail_len = np.array([psis_tail_length(S, r, conventions) for r in r_eff], dtype=np.int64)
        if np.any(tail_len < 5):
            j = int(np.argmin(tail_len))
            raise ValueError(f"log_ratios: {S} draws with r_eff={r_eff[j]:.3g} leave {tail_len[j]} draws in the "
                             f"Pareto tail of column {j}; PSIS needs at least 5 (R's psis leaves such a column "
                             "unsmoothed with k = Inf). Use more draws, or pl.tis / pl.sis.")
        lw, k = (np.asarray(a) for a in psislw(x.T, r_eff, conventions))
        norm = psis_norm_const_log(x.T, lw)
    else:
        raw = tis_log_weights(x.T) if method == "tis" else x.T
        lw = normalize_log_weights(raw)
        norm = logsumexp(raw, axis=-1)
        k = np.zeros(n)
    return PsisResult(log_weights=lw.T, pareto_k=k, tail_len=tail_len, r_eff=r_eff, n_eff=is_n_eff(lw, r_eff),
                      norm_const_log=norm, method=method)
