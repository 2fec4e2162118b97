"""``pl.loo(array)``: a log-likelihood array as the DataTree plain PSIS-LOO reads."""

from __future__ import annotations

import xarray as xr

from ppl_loo.workflow.arrays.log_lik_array import log_lik_array

__all__ = ["log_lik_tree"]


def log_lik_tree(x, var_name=None):
    """A DataTree with a ``log_likelihood`` group holding ``x`` (:func:`~.log_lik_array.log_lik_array`), and the same
    values as its ``posterior`` group (plain PSIS-LOO reads the draws' chains there: identical chains are reported)."""
    da = log_lik_array(x, "data", var_name)
    ds = da.to_dataset()
    return xr.DataTree.from_dict({"posterior": ds, "log_likelihood": ds})
