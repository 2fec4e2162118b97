"""``pl.compare``: ``arviz_stats.compare`` of adaptive LOO results, with what the adaptation touched.

The table is exactly ``arviz_stats.compare`` (unrounded) on the :class:`~ppl_loo.LooResult` objects
(and any plain ``arviz_stats`` ``ELPDData``), plus per model how many observations were adapted,
vouched for by a second opinion, doubtful or refit (:mod:`ppl_loo.workflow.loo.categories`, the counts the HTML
report shows), and how much of ``elpd_diff`` those observations carry. The numbers keep full
precision; only the printed table rounds, every numeric column to the same number of decimals.
"""

from __future__ import annotations

import contextlib
import shutil
from os import PathLike

import arviz_stats as azs
import numpy as np
import pandas as pd
import xarray as xr
from arviz_stats.utils import ELPDData, ELPDDataLOOSubsample
from scipy.stats import dirichlet, norm

from ppl_loo.numerics.model_weights import pseudobma, stacking
from ppl_loo.workflow.loo.categories import after_loo_weights, observation_categories
from ppl_loo.workflow.loo.result import LooResult

__all__ = ["compare", "CompareTable", "display_decimals", "named_results", "flag_masks", "FLAG_COLUMNS",
           "WEIGHT_COLUMNS", "COUNT_COLUMNS", "DEFAULT_DECIMALS"]

#: the columns :func:`compare` adds to ``arviz_stats.compare``'s table
#: (the counts are those of :func:`~ppl_loo.workflow.loo.categories.observation_categories`, the report's too)
FLAG_COLUMNS = ("n_adapted", "n_second_opinion", "n_doubtful", "n_refit", "diff_flagged")

#: what the columns ppl_loo adds to ``arviz_stats.compare``'s mean, printed under the table by ``ppl-loo compare``
LEGEND = ("elpd_diff: this model's elpd_loo minus the best's. n_adapted, n_second_opinion, n_doubtful, n_refit: "
          "observations whose elpd_i came from an adapted proposal (confirmed by a second opinion or not), vouched "
          "for by a second opinion without one, that nothing vouches for, refit exactly (the rest: plain PSIS; "
          "print(res) and ppl-loo loo count the same way). diff_flagged: the part of elpd_diff carried by the "
          "observations that are not plain PSIS in this model or the best one; it can be larger than elpd_diff, or of "
          "the other sign, when the other observations favour the other model.")
#: and then which weights the after-LOO functions use (:func:`~ppl_loo.workflow.loo.categories.after_loo_weights`)
WEIGHT_COLUMNS = ("n_weights_adapted", "n_weights_fallback")
#: the integer (``Int64``, NA for a plain ``ELPDData``) columns
COUNT_COLUMNS = FLAG_COLUMNS[:-1] + WEIGHT_COLUMNS

#: decimals of every numeric column of the printed table (R's ``loo_compare`` prints 1 or 2)
DEFAULT_DECIMALS = 2

ACCEPTED = ("a pl.LooResult, an xarray.DataTree with a 'loo' group (pl.add_loo), "
            "or the path of a netCDF file holding such a tree")
ACCEPTED_COMPARE = ACCEPTED + ", or an arviz_stats ELPDData (azs.loo)"


def display_decimals(round_to):
    """The number of decimals :class:`CompareTable` prints for ``round_to`` (``None``: pandas' own format).

    ``round_to`` is a whole number >= 0, ``"auto"`` (:data:`DEFAULT_DECIMALS`; not ``arviz_stats``'
    significant-figure rounding, which prints -181.56 as -200.0) or ``"none"`` / ``None`` (no rounding).
    """
    if round_to is None or (isinstance(round_to, str) and round_to.lower() == "none"):
        return None
    if isinstance(round_to, str) and round_to == "auto":
        return DEFAULT_DECIMALS
    if isinstance(round_to, (int, np.integer)) and not isinstance(round_to, (bool, np.bool_)) and round_to >= 0:
        return int(round_to)
    raise ValueError(f"round_to={round_to!r}: give the number of decimals of the printed table, a whole number >= 0 "
                     f"(default {DEFAULT_DECIMALS}), or 'none' for pandas' own format; the numbers themselves "
                     "are never rounded.")


class CompareTable(pd.DataFrame):
    """:func:`compare`'s table: a ``pandas.DataFrame`` at full precision that prints (``repr``,
    ``to_string``, the notebook HTML) every float column with ``round_to`` decimals; ``repr`` shows every column, in
    blocks as wide as ``pandas``' ``display.width`` (the terminal's where it is 0).

    Selections and arithmetic on it give plain DataFrames (printed by pandas' own rules).
    """

    _metadata = ["round_to"]
    round_to = DEFAULT_DECIMALS

    @property
    def _constructor(self):
        return pd.DataFrame

    def _float_format(self):
        decimals = getattr(self, "round_to", DEFAULT_DECIMALS)
        return None if decimals is None else (lambda x: f"{x:.{decimals}f}")

    def _display(self):
        fmt = self._float_format()
        return pd.option_context("display.float_format", fmt) if fmt is not None else contextlib.nullcontext()

    def __repr__(self):
        # every column, in blocks as wide as the terminal (pandas' display.width), not elided or wrapped mid-line
        width = pd.get_option("display.width") or shutil.get_terminal_size().columns
        with self._display(), pd.option_context("display.max_columns", None, "display.expand_frame_repr", True,
                                                "display.width", width):
            return super().__repr__()

    def _repr_html_(self):
        with self._display():
            return super()._repr_html_()

    def to_string(self, *args, **kwargs):
        """``pandas.DataFrame.to_string`` with the table's decimals (unless ``float_format`` is given)."""
        fmt = self._float_format()
        if fmt is not None:
            kwargs.setdefault("float_format", fmt)
        return super().to_string(*args, **kwargs)


def compare(results, *, method="stacking", scale="log", round_to=DEFAULT_DECIMALS) -> CompareTable:
    """Compare models by their adaptive LOO results: ``arviz_stats.compare`` plus adaptation counts.

    Parameters
    ----------
    results : dict or list
        ``{name: item}``, or a list (named ``"model_0"``, ``"model_1"``, ...); each item is a
        :class:`~ppl_loo.LooResult`, an ``xarray.DataTree`` with a ``loo`` group (``pl.add_loo``),
        the path (``str`` / ``Path``) of a netCDF file holding such a tree, or a plain
        ``arviz_stats`` ``ELPDData`` with pointwise values (``azs.loo(tree)``; its count columns
        and ``diff_flagged`` are NA: it carries no adaptation).
    method : {"stacking", "BB-pseudo-BMA", "pseudo-BMA"}
        How ``arviz_stats.compare`` weighs the models.
    scale : {"log"}
        The scale of the comparison. ``arviz_stats.compare`` (1.x) compares, and stacks, pointwise
        elpd on the log scale; every result must be on it (``res.scale``), else a ``ValueError``
        names the model.
    round_to : int or {"auto", "none"}
        Decimals of the *printed* table, every float column alike (default 2; ``"auto"``: the
        same 2, not ``arviz_stats``' significant-figure rounding; ``"none"``: pandas' own format).
        The numbers in the table are never rounded.

    Returns
    -------
    CompareTable
        A ``pandas.DataFrame`` holding ``arviz_stats.compare(..., round_to="none")``'s table (rank,
        elpd_diff, dse, p_worse, diag_diff, diag_elpd, p, elpd, se, weight; best model first), except that
        ``dse`` is ``sqrt(n) sd(elpd_i[model] - elpd_i[best])`` with the sample SD (R ``loo_compare``'s
        ``se_diff``, Vehtari et al. 2017; ``arviz_stats`` uses the population SD, ``sqrt((n - 1) / n)`` times
        it) and ``p_worse`` is computed with that ``dse``, and ``weight`` is :func:`ppl_loo.stacking_weights`' /
        :func:`ppl_loo.pseudobma_weights`' (stacking: the maximizer to round-off, where ``arviz_stats``' optimizer
        stops within its tolerance; BB-pseudo-BMA: with ``arviz_stats``' own Dirichlet draws, its numbers), and, per
        model:

        - ``n_adapted``, ``n_second_opinion``, ``n_doubtful``, ``n_refit``: the observations in each
          category of :func:`~ppl_loo.workflow.loo.categories.observation_categories` (each observation
          in one; the rest are plain PSIS): ``elpd_i`` from an adapted proposal of the search (confirmed by a
          second opinion or not), vouched for by mixture importance sampling or tempered SMC without one, nothing
          vouches for it, exact LOO by refitting; ``print(res)``, ``res.counts``, ``ppl-loo loo --json`` and the
          HTML report count the same way;
        - ``diff_flagged``: the part of ``elpd_diff`` (this model minus the top-ranked one, the sign
          of ``elpd_diff``) carried by the observations not plain PSIS in either model:
          ``sum_i (elpd_i[model] - elpd_i[best])`` over those ``i``; 0 for the best model.

        - ``n_weights_adapted``, ``n_weights_fallback``: which weights the after-LOO functions
          (``pl.loo_expectations``, ``loo_pit``, ``loo_score``, ``loo_r2``, ``loo_metrics``, ``loo_roc``) use for this
          model: the weights ``elpd_i`` came from on that many observations (an adapted proposal's, or a refit's
          or the mixture run's draws, which the result keeps), and plain PSIS weights, as a fallback, on the
          observations whose refit or mixture draws the result does not keep (a refit read from a checkpoint, draws
          beyond :data:`~ppl_loo.workflow.loo.kept.KEEP_MAX_VALUES`); plain PSIS weights on the rest.

        The counts are nullable integers (``Int64``); all seven columns are NA for a plain ``ELPDData``, which
        counts as flagging no observation in the ``diff_flagged`` of the other models.

    Raises
    ------
    TypeError
        An item is none of the accepted kinds (the message names it).
    ValueError
        The results differ in their number of observations (the message names both models and their
        sizes), a result is not on the log scale, no result is given, or ``round_to`` is not a number
        of decimals.
    """
    decimals = display_decimals(round_to)
    named, _ = named_results(results, plain=True)
    if not named:
        raise ValueError("pl.compare got no results: pass {name: result, ...} or a list of results.")
    if scale != "log":
        raise ValueError(f"scale={scale!r}: arviz_stats.compare compares pointwise elpd on the log scale; "
                         "use scale='log' (and pl.loo's default scale).")
    for name, res in named.items():
        if res.scale != "log":
            raise ValueError(f"model {name!r} is on the {res.scale!r} scale; pl.compare needs log-scale results "
                             "(recompute it with pl.loo's default scale).")
    table = azs.compare(named, method=method, round_to="none")  # never "auto": it rounds to significant figures
    best = table.index[0]
    masks = {name: flag_masks(res) for name, res in named.items()}
    elpd = {name: _flat(res.elpd_i, float) for name, res in named.items()}
    table = _sample_sd_dse(table, elpd, best)
    lpd = np.column_stack([elpd[name] for name in table.index])
    if lpd.shape[1] > 1 and np.all(np.isfinite(lpd)):  # (one model, or a non-finite elpd_i: arviz_stats' weight)
        table["weight"] = _weights(method, lpd)
    counts = {col: [] for col in FLAG_COLUMNS + WEIGHT_COLUMNS}
    for name in table.index:
        if not isinstance(named[name], LooResult):  # a plain ELPDData: nothing known about adaptation
            for col in counts:
                counts[col].append(pd.NA if col != "diff_flagged" else np.nan)
            continue
        either = masks[name]["any"] | masks[best]["any"]
        for col in FLAG_COLUMNS[:-1]:
            counts[col].append(int(masks[name][col[2:]].sum()))
        counts["diff_flagged"].append(0.0 if name == best else float(np.sum(elpd[name][either] - elpd[best][either])))
        weights = after_loo_weights(named[name])
        for col in WEIGHT_COLUMNS:
            counts[col].append(int(np.sum(weights == col[len("n_weights_"):])))
    extra = pd.DataFrame({col: pd.array(vals, dtype="Int64" if col != "diff_flagged" else "float64")
                          for col, vals in counts.items()}, index=table.index)
    out = CompareTable(table.join(extra))
    out.round_to = decimals
    return out


def _weights(method, lpd):
    """The ``weight`` column (models in the columns of ``lpd``) with ppl_loo's :mod:`~ppl_loo.numerics.model_weights`
    (the functions of ``pl.stacking_weights`` / ``pl.pseudobma_weights``): stacking's maximizer to round-off (where
    ``arviz_stats.compare``'s SLSQP stops within its tolerance); pseudo-BMA; the Bayesian bootstrap with
    ``arviz_stats.compare``'s own Dirichlet draws (``scipy.stats.dirichlet``, ``random_state=124``), so its weights
    are ``arviz_stats``'."""
    key = method.lower()
    if key == "stacking":
        return stacking(lpd)
    if key == "pseudo-bma":
        return pseudobma(lpd, BB=False)
    draws = dirichlet.rvs(alpha=[1] * lpd.shape[0], size=1000, random_state=124)
    return pseudobma(lpd, dirichlet=draws)


def _sample_sd_dse(table, elpd, best):
    """``table`` with ``dse`` the standard error of the sum of the pointwise differences from the sample SD,
    ``sqrt(m) sd(elpd_i[model] - elpd_i[best])`` over the ``m`` finite differences (R ``loo_compare``'s ``se_diff``,
    Vehtari et al. 2017, Eq. 24; ``arviz_stats.compare`` uses the population SD, ``sqrt((m - 1) / m)`` times this),
    and ``p_worse`` recomputed with it as ``arviz_stats.compare`` does, ``Phi(0; elpd_diff, dse)``."""
    table = table.copy()
    for name in table.index:
        if name == best:
            continue
        diff = elpd[name] - elpd[best]
        valid = diff[np.isfinite(diff)]
        if valid.size < 2:
            continue
        dse = float(np.sqrt(valid.size) * np.std(valid, ddof=1))
        table.loc[name, "dse"] = dse
        if "p_worse" in table.columns and table.loc[name, "elpd_diff"] != 0:
            table.loc[name, "p_worse"] = float(norm.cdf(0, table.loc[name, "elpd_diff"], dse + 1e-12))
    return table


def named_results(results, plain=False):
    """``({name: LooResult}, {name: DataTree or None})`` from what :func:`compare` accepts.

    The second dict holds the tree an item came as (a DataTree, or the tree read from a path),
    ``None`` for a bare result. Every result must have pointwise values for the same number of
    observations. ``plain=True`` (:func:`compare`) also accepts a plain ``arviz_stats`` ``ELPDData``.
    """
    if isinstance(results, dict):
        items = {str(k): v for k, v in results.items()}
    elif isinstance(results, (list, tuple)):
        items = {f"model_{i}": v for i, v in enumerate(results)}
    else:
        raise TypeError(f"results must be a dict {{name: result}} or a list of results, got "
                        f"{type(results).__name__}; each result is {ACCEPTED_COMPARE if plain else ACCEPTED}.")
    named, trees = {}, {}
    for name, item in items.items():
        named[name], trees[name] = _one_result(name, item, plain)
    _check_sizes(named)
    return named, trees


def flag_masks(res):
    """Boolean masks over the flattened observations, one per category of
    :func:`~ppl_loo.workflow.loo.categories.observation_categories` (``adapted``, ``second_opinion``, ``refit``,
    ``doubtful``; each observation in at most one) and ``any`` of them (all False for a plain ``ELPDData``)."""
    cats = observation_categories(res)
    out = {key: cats == key for key in ("adapted", "second_opinion", "refit", "doubtful")}
    out["any"] = cats != "psis"
    return out


def _flat(da, dtype):
    return np.asarray(da.values if isinstance(da, xr.DataArray) else da).astype(dtype).reshape(-1)


def _one_result(name, item, plain=False):
    """A result and the tree it came in (None for a bare result); ``plain``: a plain ``ELPDData`` too."""
    if isinstance(item, LooResult):
        res, tree = item, None
    elif plain and isinstance(item, ELPDData) and not isinstance(item, ELPDDataLOOSubsample):
        res, tree = item, None
    elif isinstance(item, ELPDData) and not isinstance(item, ELPDDataLOOSubsample):
        raise TypeError(f"model {name!r} is an arviz_stats {type(item).__name__} without ppl_loo's pointwise "
                        f"diagnostics; this needs {ACCEPTED} (pl.compare also accepts it).")
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
        raise TypeError(f"model {name!r} is a {type(item).__name__}; pl.compare accepts "
                        f"{ACCEPTED_COMPARE if plain else ACCEPTED}.")
    if getattr(res, "elpd_i", None) is None:
        how = "pl.loo(...)" if isinstance(res, LooResult) else "azs.loo(..., pointwise=True)"
        raise ValueError(f"model {name!r} has no pointwise elpd_i: compute it with {how}.")
    return res, tree


def _check_sizes(named):
    sizes = {name: _flat(res.elpd_i, float).size for name, res in named.items()}
    first = next(iter(sizes), None)
    for name, size in sizes.items():
        if size != sizes[first]:
            raise ValueError(f"the results differ in their number of observations: model {first!r} has "
                             f"{sizes[first]} and model {name!r} has {size}; compare models fitted to the same data.")
