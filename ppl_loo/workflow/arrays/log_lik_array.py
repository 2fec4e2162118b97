"""The log-likelihood of R ``loo``'s array functions as a DataArray ``(chain, draw, *obs)``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.workflow.loo.inputs import SAMPLE_DIMS, check_finite
from ppl_loo.workflow.loo.plain import NON_FINITE_FIX, plain_log_likelihood

__all__ = ["log_lik_array", "is_array_input"]


def is_array_input(x):
    """Whether ``x`` is an array of values (NumPy, JAX, an ``xarray.DataArray``), not a DataTree or a Dataset."""
    if isinstance(x, (xr.DataTree, xr.Dataset)):
        return False
    return isinstance(x, (np.ndarray, xr.DataArray)) or (hasattr(x, "__array__") and hasattr(x, "shape"))


def log_lik_array(x, what="log_lik", var_name=None):
    """``x`` as a float64 DataArray ``(chain, draw, *obs)`` named ``var_name`` (or its own name, or ``"log_lik"``;
    an array's observation dims ``{name}_dim_{j}``); ``what`` names ``x`` in the errors.

    ``x``: a NumPy (or JAX) array ``(chain, draw, *obs)`` (R ``loo``'s 3-D array, whose axes R orders
    ``(draw, chain, obs)``) or ``(draw, obs)`` (one chain: R's matrix); an ``xarray.DataArray`` with ``chain`` and
    ``draw`` dims (``draw`` alone: one chain), or without them, read by position as an array; or a DataTree, whose
    ``log_likelihood`` variable ``var_name`` is taken. Raises a ValueError naming ``what`` for fewer than two
    axes, a non-numeric array or NaN / infinite values.
    """
    if isinstance(x, xr.DataTree):
        da = plain_log_likelihood(x, var_name)
        check_finite(da.values, f"log_likelihood[{da.name!r}]", NON_FINITE_FIX)
        return da.transpose(*SAMPLE_DIMS, ...).astype(np.float64)
    name = var_name or (x.name if isinstance(x, xr.DataArray) and isinstance(x.name, str) else None) or "log_lik"
    if isinstance(x, xr.DataArray) and "draw" in x.dims:
        da = x if "chain" in x.dims else x.expand_dims(chain=1)
        da = da.transpose(*SAMPLE_DIMS, ...)
    else:
        values = x.values if isinstance(x, xr.DataArray) else x
        try:
            values = np.asarray(values)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{what}: give the log-likelihood as an array (draw, obs) or (chain, draw, *obs); got "
                            f"{type(x).__name__}.") from err
        if values.ndim < 2:
            raise ValueError(f"{what} has shape {values.shape}: give the log-likelihood as a matrix (draw, obs) of one "
                             "chain, or an array (chain, draw, *obs); one observation's draws are a (draw, 1) matrix.")
        if values.ndim == 2:
            values = values[None]
        dims = SAMPLE_DIMS + tuple(f"{name}_dim_{j}" for j in range(values.ndim - 2))
        da = xr.DataArray(values, dims=dims)
    if not np.issubdtype(da.dtype, np.number) or np.issubdtype(da.dtype, np.complexfloating):
        raise ValueError(f"{what} has dtype {da.dtype}: give real log-likelihood values.")
    da = da.astype(np.float64).rename(name)
    check_finite(da.values, what, NON_FINITE_FIX)
    return da
