"""``pl.compare``: ``arviz_stats.compare`` of adaptive LOO results, with what the adaptation touched.

The table is exactly ``arviz_stats.compare`` on the :class:`~ppl_loo.LooResult` objects, plus per
model how many observations were adapted, doubtful or refit, and how much of ``elpd_diff`` those
observations carry.
"""

from __future__ import annotations

from os import PathLike

import arviz_stats as azs
import numpy as np
import pandas as pd
import xarray as xr

from ppl_loo.workflow.result import LooResult

__all__ = ["compare", "named_results", "flag_masks", "FLAG_COLUMNS"]

#: the columns :func:`compare` adds to ``arviz_stats.compare``'s table
FLAG_COLUMNS = ("n_adapted", "n_doubtful", "n_refit", "diff_flagged")

ACCEPTED = ("a pl.LooResult, an xarray.DataTree with a 'loo' group (pl.add_loo), "
            "or the path of a netCDF file holding such a tree")


def compare(results, *, method="stacking", scale="log", round_to="auto") -> pd.DataFrame:
    """Compare models by their adaptive LOO results: ``arviz_stats.compare`` plus adaptation counts.

    Parameters
    ----------
    results : dict or list
        ``{name: item}``, or a list (named ``"model_0"``, ``"model_1"``, ...); each item is a
        :class:`~ppl_loo.LooResult`, an ``xarray.DataTree`` with a ``loo`` group (``pl.add_loo``),
        or the path (``str`` / ``Path``) of a netCDF file holding such a tree.
    method : {"stacking", "BB-pseudo-BMA", "pseudo-BMA"}
        How ``arviz_stats.compare`` weighs the models.
    scale : {"log"}
        The scale of the comparison. ``arviz_stats.compare`` (1.x) compares, and stacks, pointwise
        elpd on the log scale; every result must be on it (``res.scale``), else a ``ValueError``
        names the model.
    round_to : int or {"auto", "none"}
        Passed to ``arviz_stats.compare`` (``"none"``: raw numbers). The added columns are not rounded.

    Returns
    -------
    pandas.DataFrame
        ``arviz_stats.compare``'s table (rank, elpd_diff, dse, p_worse, diag_diff, diag_elpd, p,
        elpd, se, weight; best model first) and, per model:

        - ``n_adapted``: observations whose ``transform`` is not ``"psis"``;
        - ``n_doubtful``, ``n_refit``: observations flagged ``doubtful`` / ``refit``;
        - ``diff_flagged``: the part of ``elpd_diff`` (this model minus the top-ranked one, the sign
          of ``elpd_diff``) carried by the observations adapted, doubtful or refit in either model:
          ``sum_i (elpd_i[model] - elpd_i[best])`` over those ``i``; 0 for the best model.

    Raises
    ------
    TypeError
        An item is none of the accepted kinds (the message names it).
    ValueError
        The results differ in their number of observations (the message names both models and their
        sizes), a result is not on the log scale, or no result is given.
    """
    named, _ = named_results(results)
    if not named:
        raise ValueError("pl.compare got no results: pass {name: result, ...} or a list of results.")
    if scale != "log":
        raise ValueError(f"scale={scale!r}: arviz_stats.compare compares pointwise elpd on the log scale; "
                         "use scale='log' (and pl.loo's default scale).")
    for name, res in named.items():
        if res.scale != "log":
            raise ValueError(f"model {name!r} is on the {res.scale!r} scale; pl.compare needs log-scale results "
                             "(recompute it with pl.loo's default scale).")
    table = azs.compare(named, method=method, round_to=round_to)
    best = table.index[0]
    masks = {name: flag_masks(res) for name, res in named.items()}
    elpd = {name: _flat(res.elpd_i, float) for name, res in named.items()}
    extra = {}
    for name in table.index:
        either = masks[name]["any"] | masks[best]["any"]
        extra[name] = {
            "n_adapted": int(masks[name]["adapted"].sum()),
            "n_doubtful": int(masks[name]["doubtful"].sum()),
            "n_refit": int(masks[name]["refit"].sum()),
            "diff_flagged": 0.0 if name == best else float(np.sum(elpd[name][either] - elpd[best][either])),
        }
    return table.join(pd.DataFrame.from_dict(extra, orient="index")[list(FLAG_COLUMNS)])


def named_results(results):
    """``({name: LooResult}, {name: DataTree or None})`` from what :func:`compare` accepts.

    The second dict holds the tree an item came as (a DataTree, or the tree read from a path),
    ``None`` for a bare result. Every result must have pointwise values for the same number of
    observations.
    """
    if isinstance(results, dict):
        items = {str(k): v for k, v in results.items()}
    elif isinstance(results, (list, tuple)):
        items = {f"model_{i}": v for i, v in enumerate(results)}
    else:
        raise TypeError(f"results must be a dict {{name: result}} or a list of results, got "
                        f"{type(results).__name__}; each result is {ACCEPTED}.")
    named, trees = {}, {}
    for name, item in items.items():
        named[name], trees[name] = _one_result(name, item)
    _check_sizes(named)
    return named, trees


def flag_masks(res):
    """Boolean masks over the flattened observations: ``adapted`` (transform not ``"psis"``),
    ``doubtful``, ``refit`` and ``any`` of them."""
    n = _flat(res.elpd_i, float).size
    adapted = np.zeros(n, bool) if res.transform is None else _flat(res.transform, str) != "psis"
    out = {"adapted": adapted}
    for name in ("doubtful", "refit"):
        val = getattr(res, name, None)
        out[name] = np.zeros(n, bool) if val is None else _flat(val, bool)
    out["any"] = out["adapted"] | out["doubtful"] | out["refit"]
    return out


def _flat(da, dtype):
    return np.asarray(da.values if isinstance(da, xr.DataArray) else da).astype(dtype).reshape(-1)


def _one_result(name, item):
    """A result and the tree it came in (None for a bare result)."""
    if isinstance(item, LooResult):
        res, tree = item, None
    elif isinstance(item, xr.DataTree):
        if "loo" not in item.children:
            raise ValueError(f"model {name!r}: the DataTree has no 'loo' group; store the result with "
                             "pl.add_loo(tree, res) or pass the LooResult itself.")
        res, tree = LooResult.from_datatree(item), item
    elif isinstance(item, (str, PathLike)):
        try:
            with xr.open_datatree(item) as opened:
                tree = opened.load()
        except (OSError, ValueError) as err:
            raise ValueError(f"model {name!r}: cannot read a DataTree from {str(item)!r} ({err}).") from err
        return _one_result(name, tree)[0], tree
    else:
        raise TypeError(f"model {name!r} is a {type(item).__name__}; pl.compare accepts {ACCEPTED}.")
    if res.elpd_i is None:
        raise ValueError(f"model {name!r} has no pointwise elpd_i: compute it with pl.loo(..., pointwise=True).")
    return res, tree


def _check_sizes(named):
    sizes = {name: int(np.asarray(res.elpd_i.values).size) for name, res in named.items()}
    first = next(iter(sizes), None)
    for name, size in sizes.items():
        if size != sizes[first]:
            raise ValueError(f"the results differ in their number of observations: model {first!r} has "
                             f"{sizes[first]} and model {name!r} has {size}; compare models fitted to the same data.")
