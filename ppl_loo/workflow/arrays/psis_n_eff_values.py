"""``pl.psis_n_eff_values``: R ``loo``'s ``psis_n_eff_values``."""

from __future__ import annotations

import numpy as np

from ppl_loo.workflow.arrays.psis_result import PsisResult

__all__ = ["psis_n_eff_values"]


def psis_n_eff_values(result):
    """The effective sample size of each column's importance weights, ``r_eff / sum_s w_s^2``, as R ``loo``'s
    ``psis_n_eff_values``.

    Parameters
    ----------
    result : PsisResult or LooResult
        From :func:`ppl_loo.psis` (``sis``, ``tis``) or :func:`ppl_loo.loo` (its ``n_eff_i``).

    Returns
    -------
    numpy.ndarray
        One value per column (observation).

    Raises
    ------
    ValueError
        A LOO result without PSIS effective sample sizes.
    TypeError
        Another object.
    """
    if isinstance(result, PsisResult):
        return result.n_eff
    if hasattr(result, "elpd_i"):
        n_eff = getattr(result, "n_eff_i", None)
        if n_eff is None:
            raise ValueError(f"psis_n_eff_values: this {type(result).__name__} holds no PSIS effective sample sizes; "
                             "pl.psis(-log_lik, r_eff).n_eff computes them.")
        return np.asarray(n_eff.values).ravel()
    raise TypeError(f"psis_n_eff_values: give the result of pl.psis, pl.sis, pl.tis or pl.loo; got "
                    f"{type(result).__name__}.")
