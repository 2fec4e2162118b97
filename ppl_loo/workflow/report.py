"""``pl.report``: one self-contained HTML page comparing adaptive LOO results.

No scripts, no external CSS, fonts or images: every plot is a ``data:image/png;base64`` URI, every
name and message goes through ``html.escape``. The comparison table's cells carry the exact numbers
as ``data-value`` attributes (``repr`` of the float), so the page can be checked against
:func:`ppl_loo.compare`.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from html import escape
from importlib import metadata
from pathlib import Path

import numpy as np
import xarray as xr

from ppl_loo.workflow.compare import compare, flag_masks, named_results
from ppl_loo.workflow.predictive import loo_roc
from ppl_loo.workflow.report_figures import elpd_diff_figure, khat_figure, loo_pit_figure, roc_figure

__all__ = ["report", "SECTIONS", "VERSIONED"]

#: (id, heading) of the report's sections, in order
SECTIONS = (("compare", "Model comparison"), ("pareto-k", "Pareto k before and after adaptation"),
            ("elpd-diff", "Pointwise elpd differences"), ("loo-pit", "LOO-PIT calibration"),
            ("roc", "ROC and PR curves"), ("pvi", "PVI heterogeneity"), ("settings", "Settings and versions"))
#: distributions whose versions the report lists
VERSIONED = ("ppl_loo", "arviz_stats", "arviz_base", "arviz_plots", "numpy", "jax", "pymc", "httpstan", "pystan",
             "cmdstanpy")
TOP = 10  # observations listed per model in the elpd differences
CSS = ("body{font-family:sans-serif;margin:2em;max-width:75em;color:#222}table{border-collapse:collapse;margin:.5em 0}"
       "td,th{border:1px solid #bbb;padding:.2em .5em;text-align:right}th{background:#eee}"
       "td.text,th.text{text-align:left}p.note{color:#555;font-style:italic}img{max-width:100%}"
       "pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap}")


def report(results, path, *, data=None, models=None, title="LOO model comparison", overwrite=False) -> Path:
    """Write a self-contained HTML report comparing LOO results.

    Parameters
    ----------
    results : dict or list
        As :func:`ppl_loo.compare`: ``{name: item}`` or a list, each item a ``LooResult``, a
        DataTree with a ``loo`` group, or the path of a netCDF file of one. A DataTree (or the tree
        read from a path) is also the data of that model's plots.
    path : str or Path
        The HTML file to write (atomically: a temporary file in the same folder, then ``os.replace``).
    data : dict, optional
        ``{name: DataTree}``: the data of a model (``posterior_predictive``, ``observed_data``,
        ``log_likelihood``, ``pvi``), used instead of the tree the result came in.
    models : dict, optional
        ``{name: model}`` as accepted by :func:`ppl_loo.loo`; used for the LOO ROC / PR curves of
        binary outcomes (:func:`ppl_loo.loo_roc`).
    title : str
    overwrite : bool, default False
        Replace an existing file; without it an existing ``path`` raises ``FileExistsError``.

    Returns
    -------
    pathlib.Path
        ``path``.

    Notes
    -----
    Sections: the comparison table (:func:`ppl_loo.compare`, raw numbers), Pareto k of plain PSIS
    and after adaptation, pointwise elpd differences to the best model with the observations that
    drive them, LOO-PIT (plain PSIS weights; needs ``posterior_predictive``, ``observed_data`` and
    ``log_likelihood``), LOO ROC / PR curves (needs the model and a binary outcome), the PVI
    heterogeneity table (a ``pvi`` group), and the settings and library versions. A section that
    cannot be made for a model says why in one line.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{str(path)!r} exists; pass overwrite=True to replace it, or choose another path.")
    named, trees = named_results(results)
    trees.update(_checked_names(data, named, "data"))
    models = _checked_names(models, named, "models")
    table = compare(named, round_to="none")
    best = table.index[0]
    bodies = {
        "compare": _compare_html(table),
        "pareto-k": _khat_html(named),
        "elpd-diff": _diff_html(named, best),
        "loo-pit": _pit_html(named, trees),
        "roc": _roc_html(named, trees, models),
        "pvi": _pvi_html(named, trees),
        "settings": _settings_html(named),
    }
    sections = "\n".join(f'<section id="{sid}">\n<h2>{escape(head)}</h2>\n{bodies[sid]}\n</section>'
                         for sid, head in SECTIONS)
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n<h1>{escape(title)}</h1>\n{sections}\n</body>\n</html>\n")
    _write_atomic(path, page)
    return path


def _checked_names(extra, named, what):
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise TypeError(f"{what} must be a dict {{model name: ...}}, got {type(extra).__name__}.")
    unknown = [str(k) for k in extra if str(k) not in named]
    if unknown:
        raise ValueError(f"{what} names models {unknown} that are not among the results {list(named)}.")
    return {str(k): v for k, v in extra.items()}


def _write_atomic(path, text):
    # the prefix bounded: a long (valid) file name leaves room for mkstemp's part of the temporary name
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:100]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make the report private: the mode open() gives
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _note(text):
    return f'<p class="note">{escape(text)}</p>'


def _cell(col, value):
    """A ``<td>`` with the exact value in ``data-value`` and a formatted text."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        text = "" if value is None or (not isinstance(value, str) and _isna(value)) else str(value)
        return f'<td class="text" data-col="{escape(col)}" data-value="{escape(text)}">{escape(text)}</td>'
    if isinstance(value, (int, np.integer)):
        return f'<td data-col="{escape(col)}" data-value="{int(value)!r}">{int(value)}</td>'
    v = float(value)
    text = "&ndash;" if np.isnan(v) else (f"{v:.3f}" if col in ("weight", "p_worse", "p_better") else f"{v:.2f}")
    return f'<td data-col="{escape(col)}" data-value="{v!r}">{text}</td>'


def _isna(value):
    try:
        return bool(value != value) or str(value) == "<NA>"
    except (TypeError, ValueError):
        return False


def _table(header, rows, table_id=None):
    """An HTML table; ``rows`` are lists of ready ``<td>``/``<th>`` strings."""
    ident = f' id="{escape(table_id)}"' if table_id else ""
    head = "".join(f'<th class="text">{escape(h)}</th>' for h in header)
    body = "\n".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table{ident}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def _compare_html(table):
    rows = []
    for name, row in table.iterrows():
        rows.append([f'<th scope="row" class="text" data-model="{escape(str(name))}">{escape(str(name))}</th>']
                    + [_cell(col, row[col]) for col in table.columns])
    note = _note("pl.compare: arviz_stats.compare on the adaptive LOO results (unrounded), plus n_adapted "
                 "(transform not psis), n_doubtful, n_refit and diff_flagged: the part of elpd_diff carried by "
                 "observations adapted, doubtful or refit in this model or the best one.")
    return _table(["model", *table.columns], rows, table_id="compare-table") + "\n" + note


def _khat_html(named):
    parts = []
    for name, res in named.items():
        after = np.asarray(res.pareto_k.values, float).reshape(-1)
        before = None if res.pareto_k_psis is None else np.asarray(res.pareto_k_psis.values, float).reshape(-1)
        masks = flag_masks(res)
        good_k = float(res.good_k) if res.good_k is not None else 0.7
        uri = khat_figure(before, after, masks["adapted"], good_k, name)
        n_before = "n/a" if before is None else int(np.sum(before > good_k))
        n_before_07 = "n/a" if before is None else int(np.sum(before > 0.7))
        line = (f"{name}: {after.size} observations; Pareto k above good_k {good_k:.2f}: {n_before} with plain PSIS, "
                f"{int(np.sum(after > good_k))} after adaptation (above 0.7: {n_before_07} before, "
                f"{int(np.sum(after > 0.7))} after); {int(masks['adapted'].sum())} adapted, "
                f"{int(masks['doubtful'].sum())} doubtful, {int(masks['refit'].sum())} refit"
                + (f"; no k-hat after (NaN: refit, mixture or SMC, not importance sampling) for "
                   f"{int(np.isnan(after).sum())}" if np.isnan(after).any() else "") + ".")
        trust = "".join(f"<li>{escape(t)}</li>" for t in res.trust_lines()) if res.transform is not None else ""
        parts.append(f"<h3>{escape(name)}</h3>\n<p>{escape(line)}</p>\n"
                     f'<img src="{uri}" alt="{escape(f"Pareto k of {name}")}">\n<ul>{trust}</ul>')
    return "\n".join(parts)


def _obs_labels(res):
    da = res.elpd_i
    if da.ndim == 1 and da.dims[0] in da.coords:
        return [str(v) for v in np.asarray(da.coords[da.dims[0]].values)]
    return [",".join(str(int(j)) for j in np.unravel_index(i, da.shape)) for i in range(da.size)]


def _flag_text(masks, transform, i):
    out = []
    if masks["adapted"][i]:
        out.append(f"adapted ({transform[i]})")
    out += [flag for flag in ("doubtful", "refit") if masks[flag][i]]
    return ", ".join(out) or "psis"


def _diff_html(named, best):
    parts = [_note(f"Differences elpd_i[model] - elpd_i[{best}] against the best model (rank 0); orange: "
                   f"observations adapted, doubtful or refit in either model. The table lists the {TOP} "
                   "observations with the largest |difference|.")]
    ref = named[best]
    ref_elpd = np.asarray(ref.elpd_i.values, float).reshape(-1)
    ref_masks, ref_tr = flag_masks(ref), _transforms(ref)
    labels = _obs_labels(ref)
    if len(named) == 1:
        parts.append(_note(f"Only one model ({best}): no differences to show."))
    for name, res in named.items():
        if name == best:
            continue
        elpd = np.asarray(res.elpd_i.values, float).reshape(-1)
        masks, tr = flag_masks(res), _transforms(res)
        diff = elpd - ref_elpd
        flagged = masks["any"] | ref_masks["any"]
        uri = elpd_diff_figure(diff, flagged, f"{name} - {best}")
        rows = []
        for i in np.argsort(-np.abs(diff), kind="stable")[:TOP]:
            rows.append([_cell("obs", int(i)), f'<td class="text">{escape(labels[i])}</td>', _cell("diff", diff[i]),
                         _cell("elpd_best", ref_elpd[i]), _cell("elpd_model", elpd[i]),
                         f'<td class="text">{escape(_flag_text(ref_masks, ref_tr, i))}</td>',
                         f'<td class="text">{escape(_flag_text(masks, tr, i))}</td>'])
        line = (f"{name} - {best}: total {diff.sum():.2f}, of which {diff[flagged].sum():.2f} from "
                f"{int(flagged.sum())} flagged observations.")
        header = ["index", "label", "difference", f"elpd_i {best}", f"elpd_i {name}", f"flags {best}", f"flags {name}"]
        parts.append(f"<h3>{escape(name)} vs {escape(best)}</h3>\n<p>{escape(line)}</p>\n"
                     f'<img src="{uri}" alt="{escape(f"elpd differences of {name}")}">\n'
                     + _table(header, rows, table_id=f"diff-{name}"))
    return "\n".join(parts)


def _transforms(res):
    n = np.asarray(res.elpd_i.values).size
    return ["psis"] * n if res.transform is None else [str(t) for t in np.asarray(res.transform.values).reshape(-1)]


def _var_name(res, tree):
    if res.var_name:
        return res.var_name
    if "log_likelihood" in tree.children and len(tree["log_likelihood"].data_vars) == 1:
        return next(iter(tree["log_likelihood"].data_vars))
    return None


def _pit_reason(res, tree):
    """``(why no LOO-PIT can be drawn or None, the predictive variable, the tree to plot)``.

    The log-likelihood variable may be named otherwise than the predictive one (a Stan program's
    ``log_lik`` for ``y``, ``ppl-loo loo --posterior-predictive y_hat=y``): when the
    ``posterior_predictive`` and ``observed_data`` groups share exactly one variable of the same shape,
    the plotted tree carries the log-likelihood under that name.
    """
    if tree is None:
        return "no data for this model (pass data={name: tree}, or the DataTree holding the loo group)", None, None
    var = _var_name(res, tree)
    for group in ("posterior_predictive", "observed_data", "log_likelihood"):
        if group not in tree.children:
            return f"the data has no {group} group", var, None
    pp, obs = tree["posterior_predictive"].data_vars, tree["observed_data"].data_vars
    ll = tree["log_likelihood"].data_vars
    if var in pp and var in obs and var in ll:
        return None, var, tree
    shared = [v for v in pp if v in obs]
    if var in ll and len(shared) == 1 and tree["posterior_predictive"][shared[0]].shape == ll[var].shape:
        pred = tree["posterior_predictive"][shared[0]]
        ds = tree["log_likelihood"].to_dataset()
        ds[shared[0]] = xr.DataArray(np.asarray(ll[var].values), dims=pred.dims, coords=pred.coords)
        plotted = tree.copy()
        plotted["log_likelihood"] = xr.DataTree(ds)
        return None, shared[0], plotted
    return (f"the posterior_predictive and observed_data groups have no variable {var!r} (nor exactly one "
            "shared variable of its shape)"), var, None


def _pit_html(named, trees):
    parts = [_note("LOO-PIT from arviz_plots.plot_loo_pit: it uses plain PSIS weights (arviz_stats.loo_pit), "
                   "not the adapted proposals of ppl_loo.")]
    for name, res in named.items():
        reason, var, plotted = _pit_reason(res, trees.get(name))
        if reason is None:
            try:
                uri = loo_pit_figure(plotted, var)
            except Exception as err:  # noqa: BLE001 - a plot that fails is reported, the report still written
                reason = f"arviz_plots.plot_loo_pit failed: {type(err).__name__}: {err}"
        if reason is not None:
            parts.append(f"<h3>{escape(name)}</h3>\n" + _note(f"No LOO-PIT for {name}: {reason}."))
        else:
            parts.append(f"<h3>{escape(name)}</h3>\n"
                         f'<img src="{uri}" alt="{escape(f"LOO-PIT of {name} ({var})")}">')
    return "\n".join(parts)


def _roc_html(named, trees, models):
    parts = []
    for name, res in named.items():
        head = f"<h3>{escape(name)}</h3>\n"
        if name not in models:
            parts.append(head + _note(f"No ROC/PR for {name}: no model given (pass models={{name: model}})."))
            continue
        if trees.get(name) is None:
            parts.append(head + _note(f"No ROC/PR for {name}: no data (pass data={{name: tree}})."))
            continue
        try:
            roc = loo_roc(trees[name], res, model=models[name])
        except (ValueError, TypeError) as err:
            parts.append(head + _note(f"No ROC/PR for {name}: {err}"))
            continue
        line = (f"{name}: LOO AUC {roc.auc:.4f}, LOO average precision {roc.average_precision:.4f} "
                f"({roc.y.size} observations, {int(roc.y.sum())} positive).")
        parts.append(head + f'<p data-auc="{roc.auc!r}" data-ap="{roc.average_precision!r}">{escape(line)}</p>\n'
                     f'<img src="{roc_figure(roc, name)}" alt="{escape(f"ROC and PR of {name}")}">')
    return "\n".join(parts)


def _pvi_html(named, trees):
    parts = []
    cols = ("pvi_mean", "pvi_sd", "vi_mean", "vi_sd", "sd_ratio", "flagged")
    for name in named:
        tree = trees.get(name)
        if tree is None or "pvi" not in tree.children:
            parts.append(_note(f"{name}: no pvi group in the data (a pl.pvi fit has one)."))
            continue
        ds = tree["pvi"].to_dataset()
        present = [c for c in cols if c in ds.data_vars]
        params = [str(p) for p in np.asarray(ds.coords["param"].values)] if "param" in ds.coords else []
        rows = [[f'<td class="text">{escape(p)}</td>'] + [_cell(c, _scalar(ds[c].values[j])) for c in present]
                for j, p in enumerate(params)]
        thr = ds.attrs.get("heterogeneity_threshold", "")
        parts.append(f"<h3>{escape(name)}</h3>\n" + _note(f"PVI vs plain VI marginal sds; flagged where sd_ratio "
                                                          f"exceeds {thr}.")
                     + _table(["param", *present], rows, table_id=f"pvi-{name}"))
    return "\n".join(parts)


def _scalar(v):
    return bool(v) if isinstance(v, (bool, np.bool_)) else float(v)


def _versions():
    out = {}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _settings_html(named):
    rows = []
    for name, res in named.items():
        config = ("\n".join(f"{k}: {json.dumps(v, default=str)}" for k, v in res.engine_config.items())
                  if res.engine_config else "plain PSIS (no model)")
        rows.append([f'<th scope="row" class="text">{escape(name)}</th>', f'<td class="text">{escape(str(res.var_name))}</td>',
                     _cell("n_samples", res.n_samples), _cell("n_data_points", res.n_data_points),
                     _cell("good_k", res.good_k), _cell("max_rhat", res.max_rhat),
                     f'<td class="text">{escape(str(res.approximation or "none (posterior draws)"))}</td>',
                     f'<td class="text"><pre>{escape(config)}</pre></td>'])
    header = ["model", "var_name", "draws", "observations", "good_k", "max_rhat", "approximation", "engine_config"]
    versions = [[f'<td class="text">{escape(k)}</td>', f'<td class="text">{escape(v)}</td>'] for k, v in _versions().items()]
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (_table(header, rows, table_id="settings-table") + "\n<h3>Versions</h3>\n"
            + _table(["package", "version"], versions, table_id="versions-table") + f"\n<p>Written {escape(date)}.</p>")
