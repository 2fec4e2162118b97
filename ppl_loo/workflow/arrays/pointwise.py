"""``pl.pointwise``: R ``loo``'s ``pointwise``."""

from __future__ import annotations

from xarray import DataArray

from ppl_loo.workflow.arrays.result import ElpdResult, WaicResult

__all__ = ["pointwise"]


def _r_columns(result):
    """R's pointwise column names of ``result`` and how to get each from it."""
    if isinstance(result, WaicResult):
        return {"elpd_waic": lambda r: r.elpd_i, "p_waic": lambda r: r.p_waic_i, "waic": lambda r: r.waic_i}
    if isinstance(result, ElpdResult):
        return {"elpd": lambda r: r.elpd_i, "ic": lambda r: r.ic_i}
    return {"elpd_loo": lambda r: r.elpd_i, "mcse_elpd_loo": lambda r: getattr(r, "mcse_elpd_i", None),
            "p_loo": lambda r: getattr(r, "p_loo_i", None), "looic": lambda r: -2 * r.elpd_i,
            "influence_pareto_k": lambda r: getattr(r, "pareto_k_psis", None)}


def pointwise(result, name):
    """One pointwise quantity of a LOO, WAIC or elpd result, as R ``loo``'s ``pointwise(x, estimate)``.

    Parameters
    ----------
    result : LooResult, WaicResult or ElpdResult
        From :func:`ppl_loo.loo` (or any ``arviz_stats`` LOO result), :func:`ppl_loo.waic` or :func:`ppl_loo.elpd`.
    name : str
        R's column name: ``"elpd_loo"``, ``"mcse_elpd_loo"``, ``"p_loo"``, ``"looic"``, ``"influence_pareto_k"``
        (a LOO result; ``mcse_elpd_loo`` is ppl_loo's MCSE, ``mcse_elpd_i``, not R's log-normal approximation);
        ``"elpd_waic"``, ``"p_waic"``, ``"waic"`` (WAIC); ``"elpd"``, ``"ic"`` (elpd); or the name of any pointwise
        DataArray of the result (``"pareto_k"``, ``"elpd_i"``, ...).

    Returns
    -------
    xarray.DataArray
        Over the observation dims of the log-likelihood.

    Raises
    ------
    ValueError
        ``name`` is no pointwise quantity of ``result`` (the message lists those it has).
    TypeError
        ``result`` is not such a result, or ``name`` is not a string.
    """
    if not hasattr(result, "elpd_i"):
        raise TypeError(f"pointwise: result is a {type(result).__name__}; give the result of pl.loo, pl.waic or "
                        "pl.elpd.")
    if not isinstance(name, str):
        raise TypeError(f"pointwise: name={name!r}: give the name of one pointwise quantity as a string, e.g. "
                        "'elpd_loo'.")
    columns = {k: f for k, f in _r_columns(result).items() if f(result) is not None}
    own = {k: v for k, v in vars(result).items() if isinstance(v, DataArray) and v.shape == result.elpd_i.shape}
    if name in columns:
        return columns[name](result).rename(name)
    if name in own:
        return own[name]
    raise ValueError(f"pointwise: {name!r} is not a pointwise quantity of this {type(result).__name__}. Available: "
                     f"{', '.join(map(repr, list(columns) + sorted(own)))}.")
