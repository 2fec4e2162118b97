"""``pl.loo_function``: R ``loo``'s ``loo.function``, the log-likelihood evaluated in blocks of observations."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.psis import check_conventions, psis_tail_length
from ppl_loo.workflow.loo.chunked import psis_width
from ppl_loo.workflow.loo.inputs import MIN_DRAWS, check_finite
from ppl_loo.workflow.loo.options import ComputeOptions, as_options
from ppl_loo.workflow.loo.plain import check_k_threshold, check_reff, logmeanexp, plain_loo_result, psis_columns

__all__ = ["loo_function"]


def _n_rows(data):
    try:
        return len(data)
    except TypeError as err:
        raise TypeError(f"data: give the observations as rows of an array or a pandas DataFrame (anything with len() "
                        f"and slices); got {type(data).__name__}.") from err


def _rows(data, a, b):
    return data.iloc[a:b] if hasattr(data, "iloc") else data[a:b]


def _chain_order(chain_id, S):
    """``(order, n_chains)``: the draws reordered chain by chain (stable), and the number of chains."""
    if chain_id is None:
        return None, 1
    ids = np.asarray(chain_id).ravel()
    if ids.size != S:
        raise ValueError(f"chain_id has {ids.size} values and llfun returns {S} draws: give the chain of each draw.")
    labels, counts = np.unique(ids, return_counts=True)
    if np.any(counts != counts[0]):
        raise ValueError(f"chain_id: the chains have {sorted(set(counts.tolist()))} draws; every chain needs the same "
                         "number of draws.")
    return np.argsort(ids, kind="stable"), labels.size


def _block_values(llfun, block, draws, a, b, S):
    """``llfun(block, draws)`` as ``(S, b - a)`` float64, checked."""
    ll = np.asarray(llfun(block, draws), dtype=np.float64)
    if ll.ndim == 1 and b - a == 1:
        ll = ll[:, None]
    if ll.ndim != 2 or ll.shape[1] != b - a or (S is not None and ll.shape[0] != S):
        want = f"({S if S is not None else 'S'}, {b - a})"
        raise ValueError(f"llfun returned shape {ll.shape} for observations {a}..{b - 1}: it must return the "
                         f"log-likelihood of each draw (rows) and each observation of the block (columns), {want}.")
    check_finite(ll, f"llfun's values for observations {a}..{b - 1}", "Return finite log-likelihood values.")
    return ll


@uses_x64
def loo_function(llfun, data, draws, *, r_eff=None, chain_id=None, block_size=None, k_threshold=None, compute=None):
    """PSIS-LOO with the log-likelihood computed by a function, block by block, as R ``loo``'s ``loo.function``.

    ``llfun(data_block, draws)`` returns the ``(S, m)`` log-likelihood of the ``m`` observations of a block of rows
    of ``data`` at the ``S`` draws; plain PSIS-LOO runs on each block as it comes and keeps only the pointwise
    results, so the whole ``(S, n)`` matrix is never held (the memory of one block). The numbers are those of
    ``pl.loo(matrix)`` on the full matrix (each observation's PSIS does not depend on the others).

    Parameters
    ----------
    llfun : callable
        ``llfun(data_block, draws) -> (S, m)``; R passes one row at a time (``data_i``), this a block of rows.
    data : array_like or pandas.DataFrame
        The observations, one per row (``data[a:b]``, or ``data.iloc[a:b]`` for a DataFrame).
    draws : object
        The posterior draws, passed to ``llfun`` as they are.
    r_eff : float or array_like (n,), optional
        Relative efficiency of the draws, one value or one per observation. None: 1 (R's default), or under
        ``compute={"conventions": "R"}`` each observation's ``relative_eff`` of its likelihood draws (chains from
        ``chain_id``; R's ``relative_eff.function``).
    chain_id : array_like (S,), optional
        The chain of each draw (R's ``chain_id``): the relative efficiencies and the Monte Carlo SE use the chains.
        None: one chain.
    block_size : int, optional
        Observations per call of ``llfun``; None: as many as fit about 512 MB of working memory.
    k_threshold : float, optional
        As :func:`ppl_loo.loo`'s; default ``min(1 - 1/log10(S), 0.7)``.
    compute : ComputeOptions or dict, optional
        Only ``conventions`` (``"arviz"`` or ``"R"``, :class:`~ppl_loo.ComputeOptions`) applies.

    Returns
    -------
    LooResult
        As ``pl.loo(matrix)``'s, over one observation dim ``log_lik_dim_0``.

    Raises
    ------
    ValueError
        ``llfun`` returning another shape or non-finite values, too few draws, ``r_eff`` or ``chain_id`` of the
        wrong length, a bad ``block_size`` or ``compute``.
    """
    if not callable(llfun):
        raise TypeError(f"llfun={llfun!r}: give a function llfun(data_block, draws) returning the (S, m) "
                        "log-likelihood.")
    comp = as_options(compute, ComputeOptions, "compute", caller="pl.loo_function")
    if comp.chunk_size is not None or comp.client is not None:
        raise ValueError("compute: pl.loo_function takes only conventions= (set its size with block_size=).")
    conventions = check_conventions(comp.conventions)
    k_threshold = check_k_threshold(k_threshold)
    n = _n_rows(data)
    if isinstance(block_size, bool) or not (block_size is None or (isinstance(block_size, (int, np.integer))
                                                                   and block_size > 0)):
        raise ValueError(f"block_size={block_size!r}: give the number of observations per call of llfun as a positive "
                         "integer, or None.")
    reff = check_reff(r_eff, vector=True)
    if np.ndim(reff) and reff.size != n:
        raise ValueError(f"r_eff has {reff.size} values and data has {n} observations: give one per observation, "
                         "or one number.")
    if reff is None and conventions != "R":
        reff = 1.0
    first = _block_values(llfun, _rows(data, 0, 1), draws, 0, 1, None)
    S = first.shape[0]
    if S < MIN_DRAWS or psis_tail_length(S, float(np.max(reff)) if reff is not None else 1.0, conventions) < 5:
        raise ValueError(f"llfun returns {S} draws: PSIS needs at least 5 draws in the Pareto tail (use hundreds of "
                         "draws).")
    order, n_chains = _chain_order(chain_id, S)
    width = int(block_size) if block_size is not None else psis_width(S)
    out = {key: np.empty(n) for key in ("elpd", "k", "mcse", "n_eff", "lpd")}
    odd, max_abs = {}, 0.0
    for a in range(0, n, width):
        b = min(a + width, n)
        ll = _block_values(llfun, _rows(data, a, b), draws, a, b, S)
        ll = ll if order is None else ll[order]
        r = reff[a:b] if np.ndim(reff) else reff
        elpd, k, _, mcse, n_eff = psis_columns(ll, -ll.T, r, n_chains, conventions)
        for key, value in (("elpd", elpd), ("k", k), ("mcse", mcse), ("n_eff", n_eff), ("lpd", logmeanexp(ll))):
            out[key][a:b] = value
        odd.update({a + j: -ll[:, j] for j in np.flatnonzero(np.isnan(k) | (k == np.inf))})
        max_abs = max(max_abs, float(np.max(np.abs(ll))))
    template = xr.DataArray(np.zeros((1, 1, n)), dims=("chain", "draw", "log_lik_dim_0"), name="log_lik")
    return plain_loo_result(template, k_threshold, S, out["elpd"], out["k"], out["mcse"], out["lpd"], odd,
                            lambda: max_abs, n_eff=out["n_eff"])
