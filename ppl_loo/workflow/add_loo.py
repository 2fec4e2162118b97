"""``ppl_loo.add_loo``: write a LOO result into the user's DataTree as group ``loo``."""

from __future__ import annotations

from ppl_loo.workflow.inputs import check_datatree
from ppl_loo.workflow.result import loo_datatree

__all__ = ["add_loo"]


def add_loo(data, res, group="loo"):
    """Return a copy of ``data`` with the LOO result as group ``group``.

    The group holds the pointwise results (``elpd_i``, ``p_loo_i``, ``pareto_k``, ``pareto_k_psis``,
    ``transform``, ``hbar_used``, ``mcse_elpd_i``, ``n_eff_i``, ``influence``, ``doubtful``, ...) over
    the observation dims of the log-likelihood variable, the weights ``loo_expectation`` needs, and
    the summary (``elpd``, ``se``, ``p``, ``good_k``, ``n_samples``, ``n_data_points``, ``warning``,
    ``var_name``, ...) in its attrs: everything :meth:`ppl_loo.LooResult.from_datatree` needs to
    rebuild the result (:func:`ppl_loo.workflow.result.loo_datatree` lists it).

    Parameters
    ----------
    data : xarray.DataTree
    res : LooResult or arviz_stats.utils.ELPDData
    group : str

    Returns
    -------
    xarray.DataTree
        A copy of ``data``; ``data`` itself is not modified.
    """
    data = check_datatree(data)
    node = loo_datatree(res)
    out = data.copy()
    out[group] = node
    return out
