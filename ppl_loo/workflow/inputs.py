"""Reading and checking the user's DataTree (posterior, log_likelihood, observed_data)."""

from __future__ import annotations

import numpy as np
import xarray as xr

__all__ = ["check_datatree", "get_log_likelihood", "stack_draws", "r_eff_of", "max_rhat_of", "SAMPLE_DIMS"]

SAMPLE_DIMS = ("chain", "draw")


def check_datatree(data):
    """Return ``data`` as a DataTree with a ``posterior`` group, or raise a clear error."""
    if not isinstance(data, xr.DataTree):
        try:
            from arviz_base import convert_to_datatree

            data = convert_to_datatree(data)
        except Exception as err:  # noqa: BLE001
            raise TypeError(
                f"`data` must be an xarray.DataTree (ArviZ 1.x) with a 'posterior' group; got "
                f"{type(data).__name__}. Convert it with arviz_base.convert_to_datatree."
            ) from err
    if "posterior" not in data.children:
        raise ValueError(
            "`data` has no 'posterior' group: ppl_loo needs posterior draws. Pass the DataTree "
            "returned by pm.sample / ppl_loo.from_cmdstan / ppl_loo.sample_nuts."
        )
    post = data["posterior"].to_dataset()
    for dim in SAMPLE_DIMS:
        if dim not in post.dims:
            raise ValueError(
                f"the 'posterior' group has no '{dim}' dimension (dims: {tuple(post.dims)}); "
                "draws must be stored with dims ('chain', 'draw', ...)."
            )
    return data


def get_log_likelihood(data, var_name=None):
    """The log-likelihood DataArray ``(chain, draw, *obs_dims)`` of ``var_name``, or None."""
    if "log_likelihood" not in data.children:
        return None
    ds = data["log_likelihood"].to_dataset()
    if var_name is None:
        names = list(ds.data_vars)
        if len(names) != 1:
            raise ValueError(
                f"the 'log_likelihood' group has several variables {names}: pick one with var_name=..."
            )
        var_name = names[0]
    if var_name not in ds.data_vars:
        raise ValueError(
            f"var_name={var_name!r} is not in the 'log_likelihood' group (it has {list(ds.data_vars)})."
        )
    da = ds[var_name]
    for dim in SAMPLE_DIMS:
        if dim not in da.dims:
            raise ValueError(f"log_likelihood[{var_name!r}] has no '{dim}' dimension (dims {da.dims}).")
    return da.transpose(*SAMPLE_DIMS, ...)


def stack_draws(da):
    """``(chain, draw, *obs)`` DataArray -> ``(S, n)`` float64 array, chain-major, obs C-order."""
    arr = np.asarray(da.transpose(*SAMPLE_DIMS, ...).values, dtype=np.float64)
    S = arr.shape[0] * arr.shape[1]
    return arr.reshape(S, -1)


def check_finite(arr, what, fix):
    """Raise a ValueError naming ``what`` when ``arr`` has NaN or infinite entries."""
    arr = np.asarray(arr)
    bad = ~np.isfinite(arr)
    if bad.any():
        n_bad = int(bad.sum())
        raise ValueError(f"{what} has {n_bad} non-finite value(s) (NaN or inf). {fix}")


def r_eff_of(data, n_samples):
    """Relative efficiency as ``arviz_stats.loo`` computes it (mean ESS / S over all variables)."""
    post = data["posterior"].to_dataset()
    if post.sizes["chain"] == 1:
        return 1.0
    import arviz_stats  # noqa: F401  (registers the azstats accessor)

    ess = post.azstats.ess(method="mean")
    vals = np.hstack([np.asarray(ess[v].values).ravel() for v in ess.data_vars])
    return float(vals.mean() / n_samples)


def max_rhat_of(data):
    """The largest rank-normalized split R-hat (Vehtari et al. 2021, ``arviz_stats``' default) over every
    element of every posterior variable, with where it is: ``(rhat, "name[index]")``, or
    ``(nan, None)`` where it cannot be computed (fewer than 4 draws per chain, constant variables)."""
    post = data["posterior"].to_dataset()
    if post.sizes.get("draw", 0) < 4:
        return float("nan"), None
    import arviz_stats  # noqa: F401  (registers the azstats accessor)

    rh = post.azstats.rhat()
    worst, where = float("nan"), None
    for name in rh.data_vars:
        a = np.asarray(rh[name].values, dtype=float)
        if not np.any(np.isfinite(a)):
            continue
        j = int(np.nanargmax(a))
        if not worst >= a.flat[j]:
            worst = float(a.flat[j])
            idx = np.unravel_index(j, a.shape) if a.ndim else ()
            where = str(name) + (f"[{', '.join(str(int(x)) for x in idx)}]" if idx else "")
    return worst, where
