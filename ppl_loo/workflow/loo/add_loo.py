"""``ppl_loo.add_loo``: write a LOO result into the user's DataTree as group ``loo``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.workflow.loo.inputs import check_datatree, get_log_likelihood
from ppl_loo.workflow.loo.result import loo_datatree
from ppl_loo.workflow.subsample.result import SubsampleResult

__all__ = ["add_loo", "check_matches"]


def add_loo(data, res, group="loo", *, overwrite=False):
    """Return a copy of ``data`` with the LOO result as group ``group``.

    The group holds the pointwise results (``elpd_i``, ``p_loo_i``, ``pareto_k``, ``pareto_k_psis``,
    ``transform``, ``hbar_used``, ``mcse_elpd_i``, ``n_eff_i``, ``influence``, ``doubtful``, ...) over
    the observation dims of the log-likelihood variable, the weights ``loo_expectations`` needs, and
    the summary (``elpd``, ``se``, ``p``, ``good_k``, ``n_samples``, ``n_data_points``, ``warning``,
    ``var_name``, ...) in its attrs: everything :meth:`ppl_loo.LooResult.from_datatree` needs to
    rebuild the result (:func:`ppl_loo.workflow.loo.result.loo_datatree` lists it).

    Parameters
    ----------
    data : xarray.DataTree
    res : LooResult or arviz_stats.utils.ELPDData
    group : str
    overwrite : bool
        Replace an existing group ``group``; without it an existing group is never replaced.

    The result must belong to ``data``: its observations (dims, sizes and coordinates of ``elpd_i``) must be
    those of the ``log_likelihood`` variable it was computed from (``res.var_name``), where ``data`` has one.

    Returns
    -------
    xarray.DataTree
        A copy of ``data``; ``data`` itself is not modified.
    """
    data = check_datatree(data)
    if isinstance(res, SubsampleResult):
        raise TypeError("res is a pl.loo_subsample result: it has elpd_i for the subsample only, and pl.add_loo writes "
                        "a full LOO result. Keep it as it is (it pickles), or run pl.loo for the full result.")
    if not isinstance(group, str) or not group:
        raise TypeError(f"group={group!r}: give the name of the group to write as a non-empty string.")
    if group in data.children and not overwrite:
        raise ValueError(f"`data` already has a group {group!r}: pass overwrite=True to replace it (the old one is "
                         "lost), or group='another_name' to keep both.")
    node = loo_datatree(res)
    check_matches(data, res)
    out = data.copy()
    out[group] = node
    return out


def check_matches(data, res):
    """Refuse a result whose observations are not those of ``data``'s log-likelihood variable."""
    var = getattr(res, "var_name", None)
    if "log_likelihood" not in data.children:
        return
    names = list(data["log_likelihood"].data_vars)
    if var is not None and var not in names:
        raise ValueError(f"the result is for the log-likelihood variable {var!r}, but `data`'s log_likelihood group "
                         f"has {names}: pass the DataTree the result was computed from.")
    if var is None:
        if len(names) != 1:
            return
        var = names[0]
    ref = get_log_likelihood(data, var).isel(chain=0, draw=0, drop=True)
    elpd_i = res.elpd_i
    if not isinstance(elpd_i, xr.DataArray):
        return
    if ref.size == 1 and elpd_i.size > 1:  # one joint term per draw (a non-factorizing likelihood): nothing to match
        return
    if dict(elpd_i.sizes) != dict(ref.sizes):
        raise ValueError(f"the result's observations {dict(elpd_i.sizes)} do not match log_likelihood[{var!r}] of "
                         f"`data` {dict(ref.sizes)}: pass the DataTree the result was computed from.")
    for dim in ref.dims:
        if dim in ref.coords or dim in elpd_i.coords:  # a dim without coordinates counts 0, 1, ... (as xarray)
            a, b = np.asarray(ref.get_index(dim)), np.asarray(elpd_i.get_index(dim))
            if a.shape != b.shape or not np.array_equal(a, b):
                raise ValueError(f"the result's coordinates of {dim!r} ({b[:5].tolist()}...) are not those of "
                                 f"log_likelihood[{var!r}] in `data` ({a[:5].tolist()}...): pass the DataTree the "
                                 "result was computed from.")
