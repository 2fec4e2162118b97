"""``ppl_loo.add_loo``: write a LOO result into the user's DataTree as group ``loo``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.workflow.inputs import check_datatree

__all__ = ["add_loo"]

_POINTWISE = ("elpd_i", "p_loo_i", "pareto_k", "pareto_k_psis", "transform", "hbar_used", "mcse_elpd_i", "n_eff_i",
              "influence", "doubtful")


def add_loo(data, res, group="loo"):
    """Return a copy of ``data`` with the pointwise LOO results as group ``group``.

    The variables (``elpd_i``, ``p_loo_i``, ``pareto_k``, ``pareto_k_psis``, ``transform``,
    ``hbar_used``, ``mcse_elpd_i``, ``n_eff_i``, ``influence``, ``doubtful``) have the observation dims of the
    log-likelihood variable; the summary (``elpd``, ``se``, ``p``, ``good_k``, ``n_samples``,
    ``n_data_points``, ``warning``, ``var_name``) is stored in the group's attrs.
    """
    data = check_datatree(data)
    if getattr(res, "elpd_i", None) is None:
        raise ValueError("`res` has no pointwise results: compute it with pointwise=True.")
    variables = {}
    for name in _POINTWISE:
        val = getattr(res, name, None)
        if val is None:
            continue
        da = val if isinstance(val, xr.DataArray) else xr.DataArray(np.asarray(val))
        variables[name] = da.rename(name)
    ds = xr.Dataset(variables)
    ds.attrs.update(
        elpd=float(res.elpd),
        se=float(res.se),
        p=float(res.p),
        good_k=float(res.good_k),
        n_samples=int(res.n_samples),
        n_data_points=int(res.n_data_points),
        warning=int(bool(res.warning)),
        var_name=str(getattr(res, "var_name", "") or ""),
        method="ppl_loo adaptive importance sampling",
    )
    out = data.copy()
    out[group] = xr.DataTree(ds)
    return out
