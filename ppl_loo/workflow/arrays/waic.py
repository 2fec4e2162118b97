"""``pl.waic``: R ``loo``'s ``waic``."""

from __future__ import annotations

import warnings

import numpy as np

from ppl_loo.workflow.arrays.log_lik_array import log_lik_array
from ppl_loo.workflow.arrays.result import WaicResult
from ppl_loo.workflow.loo.inputs import stack_draws
from ppl_loo.workflow.loo.plain import logmeanexp, stable_se, stable_sum

__all__ = ["waic"]


def waic(data, var_name=None):
    """The widely applicable information criterion, as R ``loo``'s ``waic``.

    Per observation ``lpd_i = log mean_s p(y_i | theta_s)``, ``p_waic_i`` the sample variance (``ddof=1``) of
    ``log p(y_i | theta_s)`` over the draws, ``elpd_waic_i = lpd_i - p_waic_i`` and ``waic_i = -2 elpd_waic_i``; the
    estimates are their sums, the SEs ``sqrt(n var)``. Warns, as R, where some ``p_waic_i`` exceed 0.4.

    Parameters
    ----------
    data : DataTree, numpy.ndarray or xarray.DataArray
        A DataTree with a ``log_likelihood`` group, or the log-likelihood values: ``(chain, draw, *obs)`` or
        ``(draw, obs)`` (R's ``waic.array`` / ``waic.matrix``).
    var_name : str, optional
        The log-likelihood variable of a DataTree (needed when there are several).

    Returns
    -------
    WaicResult
        ``elpd``, ``se``, ``p`` (``p_waic``) and pointwise ``elpd_i``, ``p_waic_i``, ``waic_i`` over the observation
        dims; ``estimates`` is R's table.

    Raises
    ------
    ValueError
        An array with fewer than two axes, NaN or infinite values, or a DataTree without a log-likelihood.
    """
    da = log_lik_array(data, "data", var_name)
    ll = stack_draws(da)
    if ll.shape[0] < 2:
        raise ValueError(f"data has {ll.shape[0]} draw: p_waic is a variance over the draws; give at least 2 draws.")
    lpd = logmeanexp(ll)
    p_i = np.var(ll, axis=0, ddof=1)
    elpd_i = lpd - p_i
    ref0 = da.isel(chain=0, draw=0, drop=True)

    def make(values, name):
        return ref0.copy(data=np.asarray(values).reshape(ref0.shape)).rename(name)

    high = p_i > 0.4
    if high.any():
        warnings.warn(f"{int(high.sum())} ({100 * high.mean():.1f}%) p_waic estimates greater than 0.4: WAIC is "
                      "unreliable there; use pl.loo instead.", UserWarning, stacklevel=2)
    return WaicResult(elpd=stable_sum(elpd_i), se=stable_se(elpd_i), p=stable_sum(p_i), n_samples=ll.shape[0],
                      n_data_points=ll.shape[1], scale="log", warning=bool(high.any()), good_k=float("nan"),
                      elpd_i=make(elpd_i, "elpd_i"), p_waic_i=make(p_i, "p_waic_i"), waic_i=make(-2 * elpd_i, "waic_i"))
