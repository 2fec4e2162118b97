"""``pl.elpd``: R ``loo``'s ``elpd``."""

from __future__ import annotations

import numpy as np

from ppl_loo.workflow.arrays.log_lik_array import log_lik_array
from ppl_loo.workflow.arrays.result import ElpdResult
from ppl_loo.workflow.loo.inputs import stack_draws
from ppl_loo.workflow.loo.plain import logmeanexp, stable_se, stable_sum

__all__ = ["elpd"]


def elpd(data, var_name=None):
    """The expected log predictive density without leave-one-out, as R ``loo``'s ``elpd``.

    For the log-likelihood of data the draws were not conditioned on (test data): per observation
    ``elpd_i = log mean_s p(y_i | theta_s)`` and ``ic_i = -2 elpd_i``; the estimates are their sums, the SEs
    ``sqrt(n var)``. On the training data this is the in-sample ``lpd``, an optimistic estimate (use
    :func:`ppl_loo.loo`).

    Parameters
    ----------
    data : DataTree, numpy.ndarray or xarray.DataArray
        A DataTree with a ``log_likelihood`` group, or the log-likelihood values: ``(chain, draw, *obs)`` or
        ``(draw, obs)`` (R's ``elpd.array`` / ``elpd.matrix``).
    var_name : str, optional
        The log-likelihood variable of a DataTree (needed when there are several).

    Returns
    -------
    ElpdResult
        ``elpd``, ``se``, pointwise ``elpd_i`` and ``ic_i`` over the observation dims; ``estimates`` is R's table.

    Raises
    ------
    ValueError
        An array with fewer than two axes, NaN or infinite values, or a DataTree without a log-likelihood.
    """
    da = log_lik_array(data, "data", var_name)
    ll = stack_draws(da)
    elpd_i = logmeanexp(ll)
    ref0 = da.isel(chain=0, draw=0, drop=True)

    def make(values, name):
        return ref0.copy(data=np.asarray(values).reshape(ref0.shape)).rename(name)

    return ElpdResult(elpd=stable_sum(elpd_i), se=stable_se(elpd_i), p=float("nan"), n_samples=ll.shape[0],
                      n_data_points=ll.shape[1], scale="log", warning=False, good_k=float("nan"),
                      elpd_i=make(elpd_i, "elpd_i"), ic_i=make(-2 * elpd_i, "ic_i"))
