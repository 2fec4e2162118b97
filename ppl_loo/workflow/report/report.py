"""``pl.report``: one self-contained HTML page comparing adaptive LOO results.

This module owns the page: which sections it shows (only those with content for at least one model), the
category of each observation (:func:`~ppl_loo.workflow.loo.categories.observation_categories`: not adapted, adapted,
vouched by a second opinion, refit, doubtful), which is the one source of every count on the page (headers, prose,
tables and the figures' legends), and the provenance it names (the Stan program, data and CSV files ``ppl-loo loo``
stores in the netCDF file). The figures are drawn by :mod:`ppl_loo.workflow.report.figures`.

No scripts, no external CSS, fonts or images: every plot is a ``data:image/png;base64`` URI, every
name and message goes through ``html.escape``. Table cells carry the exact numbers as ``data-value``
attributes (``repr`` of the float): the comparison table's ``arviz_stats`` columns can be checked against
:func:`ppl_loo.compare`, its counts against :func:`observation_categories`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime, timezone
from html import escape
from importlib import metadata
from pathlib import Path

import arviz_stats as azs
import numpy as np
import xarray as xr
from arviz_base import rcParams

from ppl_loo.workflow.downstream.compare import FLAG_COLUMNS, WEIGHT_COLUMNS, compare, named_results
from ppl_loo.workflow.downstream.loo_pit import loo_pit
from ppl_loo.workflow.downstream.loo_roc import loo_roc
from ppl_loo.workflow.loo.categories import CATEGORIES, SHORT, category_counts, observation_categories
from ppl_loo.workflow.loo.categories import evidence as _evidence
from ppl_loo.workflow.loo.categories import transforms as _transforms
from ppl_loo.workflow.loo.messages import nats
from ppl_loo.workflow.report.figures import elpd_diff_figure, khat_figure, loo_pit_figure, pit_values_figure, roc_figure

__all__ = ["report", "observation_categories", "category_counts", "CATEGORIES", "PROVENANCE", "SECTIONS",
           "VERSIONED"]

#: (id, heading) of the report's sections, in order; a section without content for any model is left out
SECTIONS = (("source", "Source"), ("compare", "Model comparison"),
            ("pareto-k", "Pareto k before and after adaptation"), ("elpd-diff", "Pointwise elpd differences"),
            ("loo-pit", "LOO-PIT calibration"), ("roc", "ROC and PR curves"), ("pvi", "PVI heterogeneity"),
            ("settings", "Settings and versions"))
#: the order of the observation tables' rows
SEVERITY = ("doubtful", "refit", "second_opinion", "adapted")
#: root attributes of a ``ppl-loo loo --out`` file naming its inputs: (attribute, what it names)
PROVENANCE = (("ppl_loo_stan_file", "Stan program"), ("ppl_loo_data_file", "data file"),
              ("ppl_loo_csv_files", "CSV files"))
STAN_CODE = "ppl_loo_stan_code"
#: distributions whose versions the report lists
VERSIONED = ("ppl_loo", "arviz_stats", "arviz_base", "arviz_plots", "numpy", "jax", "pymc", "httpstan", "pystan",
             "cmdstanpy")
TOP = 10  # observations listed per model in the elpd differences
TOP_OBS = 50  # observations listed per model in the Pareto k section
#: lines of LooResult.trust_lines() that count observations their own way: the report counts by category
COUNTED = re.compile(r"^(Adaptive importance sampling \(ppl_loo\)[,:] |Vouched for: "
                     r"|\d+ (refit \(exact LOO\)|doubtful): they carry )")
STACKING = ("Stacking weights (column weight): the weights of the combination of the models' predictive "
            "distributions that maximises the LOO log score (the elpd of the combined prediction). They are not "
            "posterior model probabilities: a model whose predictions the others already cover can get weight 0 with "
            "an elpd close to the best, and a model with weight 1 need not be the true one.")
CSS = ("body{font-family:sans-serif;margin:2em;max-width:75em;color:#222}table{border-collapse:collapse;margin:.5em 0}"
       "div.scroll{overflow-x:auto;max-width:100%}"
       "td,th{border:1px solid #bbb;padding:.2em .5em;text-align:right}th{background:#eee}"
       "td.text,th.text{text-align:left}p.note{color:#555;font-style:italic}img{max-width:100%}"
       "pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap}tr.cat-doubtful td{background:#fde2e2}"
       ".cat-doubtful{color:#b00;font-weight:bold}.cat-refit{color:#7b4ea3}.cat-second_opinion{color:#237a23}"
       ".cat-adapted{color:#c05a00}")


def report(results, path, *, data=None, models=None, title="LOO model comparison", overwrite=False) -> Path:
    """Write a self-contained HTML report comparing LOO results.

    Parameters
    ----------
    results : dict or list
        As :func:`ppl_loo.compare`: ``{name: item}`` or a list, each item a ``LooResult``, a
        DataTree with a ``loo`` group, or the path of a netCDF file of one. A DataTree (or the tree
        read from a path) is also the data of that model's plots, and its provenance (the files
        ``ppl-loo loo --out`` names in it).
    path : str or Path
        The HTML file to write (atomically: a temporary file in the same folder, then ``os.replace``).
    data : dict, optional
        ``{name: DataTree}``: the data of a model (``posterior_predictive``, ``observed_data``,
        ``log_likelihood``, ``pvi``), used instead of the tree the result came in.
    models : dict, optional
        ``{name: model}`` as accepted by :func:`ppl_loo.loo`; used for the LOO ROC / PR curves of
        binary outcomes (:func:`ppl_loo.loo_roc`) and the LOO-PIT with the adapted weights
        (:func:`ppl_loo.loo_pit`, where the observation model has a CDF).
    title : str
    overwrite : bool, default False
        Replace an existing file; without it an existing ``path`` raises ``FileExistsError``.

    Returns
    -------
    pathlib.Path
        ``path``.

    Notes
    -----
    Sections (:data:`SECTIONS`): the Stan program, data and CSV files the results came from (when stored),
    the comparison table (:func:`ppl_loo.compare`'s ``arviz_stats`` columns, raw numbers, with each model's
    observations counted by category and what the stacking weights mean), Pareto k of plain PSIS and of the
    estimate reported with each observation drawn by its category (:func:`observation_categories`), pointwise
    elpd differences to the best model (two models or more), LOO-PIT (the adapted weights, :func:`ppl_loo.loo_pit`,
    for a model given in ``models`` with a predictive CDF; else plain PSIS weights, which need
    ``posterior_predictive``, ``observed_data`` and ``log_likelihood``) with its uniformity test in words,
    LOO ROC / PR curves (models given in ``models`` with a binary outcome), the PVI heterogeneity table
    (data with a ``pvi`` group), and the settings and library versions. A section with nothing to show for
    any model is left out.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{str(path)!r} exists; pass overwrite=True to replace it, or choose another path.")
    named, trees = named_results(results)
    extra = _checked_names(data, named, "data")
    models = _checked_names(models, named, "models")
    sources = {name: _provenance(trees.get(name)) or _provenance(extra.get(name)) for name in named}
    trees.update(extra)
    table = compare(named, round_to="none")
    best = table.index[0]
    cats = {name: observation_categories(res) for name, res in named.items()}
    bodies = {
        "source": _source_html(sources),
        "compare": _compare_html(table, named, cats),
        "pareto-k": _khat_html(named, cats),
        "elpd-diff": _diff_html(named, best, cats),
        "loo-pit": _pit_html(named, trees, models),
        "roc": _roc_html(named, trees, models),
        "pvi": _pvi_html(named, trees),
        "settings": _settings_html(named),
    }
    sections = "\n".join(f'<section id="{sid}">\n<h2>{escape(head)}</h2>\n{bodies[sid]}\n</section>'
                         for sid, head in SECTIONS if bodies[sid])
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n<h1>{escape(title)}</h1>\n{sections}\n</body>\n</html>\n")
    _write_atomic(path, page)
    return path


def _strings(da, n, default):
    return np.full(n, default, dtype="<U32") if da is None else np.asarray(da.values).astype(str).reshape(-1)


def _flat(da):
    return np.asarray(da.values, dtype=float).reshape(-1)


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


def _attr_json(value):
    """A value as JSON inside an HTML attribute."""
    return escape(json.dumps(value), quote=True)


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
    return (f'<div class="scroll"><table{ident}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n'
            "</table></div>")


def _provenance(tree):
    """``{what: [file, ...]}`` of the inputs a ``ppl-loo loo --out`` file names, and the Stan program's text;
    ``({}, "")`` when the tree names none."""
    attrs = {} if tree is None else tree.attrs
    found = {what: [p for p in str(attrs[key]).splitlines() if p.strip()] for key, what in PROVENANCE
             if str(attrs.get(key, "")).strip()}
    return (found, str(attrs.get(STAN_CODE, ""))) if found else ({}, "")


def _source_html(sources):
    parts = []
    for name, (found, code) in sources.items():
        if not found:
            continue
        rows = [[f'<th scope="row" class="text">{escape(what)}</th>',
                 f'<td class="text" data-col="{escape(what)}">{"<br>".join(escape(f) for f in files)}</td>']
                for what, files in found.items()]
        program = (f"<details><summary>Stan program as compiled ({len(code.splitlines())} lines)</summary>\n"
                   f"<pre>{escape(code)}</pre></details>" if code.strip() else "")
        parts.append(f"<h3>{escape(name)}</h3>\n" + _table(["input", "file"], rows, table_id=f"source-{name}")
                     + program)
    if not parts:
        return None
    return _note("The files each result was computed from, as `ppl-loo loo --out` stored them.") + "\n".join(parts)


def _compare_html(table, named, cats):
    """pl.compare's arviz_stats columns, then each model's observations counted by category and the part of
    elpd_diff the observations not plain PSIS (in the model or the best one) carry."""
    best = table.index[0]
    stats = [c for c in table.columns if c not in FLAG_COLUMNS + WEIGHT_COLUMNS]
    rows = []
    for name, row in table.iterrows():
        counts = category_counts(cats[name])
        either = (cats[name] != "psis") | (cats[best] != "psis")
        part = 0.0 if name == best else float(np.sum(_flat(named[name].elpd_i)[either]
                                                     - _flat(named[best].elpd_i)[either]))
        rows.append([f'<th scope="row" class="text" data-model="{escape(str(name))}">{escape(str(name))}</th>']
                    + [_cell(col, row[col]) for col in stats] + [_cell(f"n_{k}", v) for k, v in counts.items()]
                    + [_cell("diff_not_psis", part)] + [_cell(col, row[col]) for col in WEIGHT_COLUMNS])
    header = ["model", *stats, *(SHORT[k] for k in CATEGORIES), "elpd_diff from the others",
              "after LOO: adapted weights", "after LOO: PSIS fallback"]
    note = _note("pl.compare: arviz_stats.compare on the adaptive LOO results (unrounded). Then each model's "
                 "observations by what happened to them (the categories of the Pareto k figures and tables below; "
                 "each observation in one): " + "; ".join(CATEGORIES.values())
                 + ". 'elpd_diff from the others': the part of elpd_diff carried by the observations not plain PSIS "
                 "in this model or the best one. 'After LOO': the observations on which LOO-PIT, LOO scores (CRPS, "
                 "SCRPS), LOO R², metrics, ROC and LOO expectations and quantiles (pl.loo_pit, loo_score, loo_r2, "
                 "loo_metrics, loo_roc, loo_expectations) use the weights elpd_i came from (an adapted proposal's, "
                 "a refit's or the mixture run's draws), and those whose refit or mixture draws the result does not "
                 "keep (a refit read from a checkpoint): plain PSIS weights there (a fallback, with a warning); plain "
                 "PSIS weights on the rest.")
    weights = f'<p class="weights">{escape(STACKING)}</p>' if "weight" in stats else ""
    return _table(header, rows, table_id="compare-table") + "\n" + weights + "\n" + note


def _khat_html(named, cats):
    parts = [_note("Each observation is drawn by what happened to it: " + "; ".join(CATEGORIES.values())
                   + ". Both panels share the y-scale; an observation without a k-hat after (refit, mixture or "
                   "SMC: no importance sampling) is drawn hollow at its plain-PSIS k.")]
    for name, res in named.items():
        parts.append(_khat_model(name, res, cats[name]))
    return "\n".join(parts)


def _khat_model(name, res, cats):
    after = _flat(res.pareto_k)
    before = None if res.pareto_k_psis is None else _flat(res.pareto_k_psis)
    good_k = float(res.good_k) if res.good_k is not None else 0.7
    x, xlabel = _numbering(res)
    drawn = khat_figure(before, after, cats, CATEGORIES, good_k, name, res.obs_labels(), x=x, xlabel=xlabel)
    counts = category_counts(cats)
    data = " ".join(f'data-{k.replace("_", "-")}="{v}"' for k, v in counts.items())
    line = (f"{name}: {after.size} observations: " + ", ".join(f"{counts[k]} {CATEGORIES[k]}" for k in CATEGORIES)
            + ".")
    with np.errstate(invalid="ignore"):
        n_before = "n/a" if before is None else int(np.sum(before > good_k))
        n_after, n_nan = int(np.sum(after > good_k)), int(np.sum(np.isnan(after)))
    kline = (f"Pareto k above the threshold {good_k:.2f}: {n_before} with plain PSIS, {n_after} for the estimate "
             "reported" + (f"; no k-hat after for {n_nan} (refit, mixture or SMC: not importance sampling)"
                           if n_nan else "") + ".")
    trust = "".join(f"<li>{escape(t)}</li>" for t in _trust_lines(res, cats))
    img = (f'<img src="{drawn.uri}" alt="{escape(f"Pareto k of {name}")}" data-legend="{_attr_json(drawn.legend)}" '
           f'data-ylim="{_attr_json(drawn.ylim)}" data-xticks="{_attr_json(drawn.xticks)}" '
           f'data-legend-outside="{str(drawn.legend_outside).lower()}">')
    return (f"<h3>{escape(name)}</h3>\n"
            f'<p class="counts" data-model="{escape(name)}" {data}>{escape(line)}</p>\n<p>{escape(kline)}</p>\n'
            f"{img}\n" + (f"<ul>{trust}</ul>\n" if trust else "") + _obs_table(name, res, cats))


def _trust_lines(res, cats):
    """What the result says of itself (:meth:`LooResult.trust_lines`), its counts replaced by the categories'."""
    if getattr(res, "transform", None) is None:
        return []
    elpd_i, ev = _flat(res.elpd_i), _evidence(res)
    lines = []
    for cat in ("second_opinion", "refit", "doubtful"):
        mask = cats == cat
        if mask.any():
            part = float(elpd_i[mask].sum())
            kinds = ", ".join(f"{k} {int(np.sum(ev[mask] == k))}" for k in sorted(set(ev[mask])) if k)
            lines.append(f"{int(mask.sum())} {CATEGORIES[cat]}" + (f" ({kinds})" if cat == "second_opinion" else "")
                         + f": they carry {nats(part)} of elpd_loo {res.elpd:.2f}"
                         + (f" ({100 * part / res.elpd:.0f}%)" if res.elpd else ""))
    return lines + [line for line in res.trust_lines() if not COUNTED.match(line)]


def _obs_table(name, res, cats):
    """The observations not plain PSIS, worst first: what happened, the proposal, k-hats, elpd_i and why."""
    n = cats.size
    k0 = _flat(res.pareto_k_psis) if res.pareto_k_psis is not None else _flat(res.pareto_k)
    order = [i for cat in SEVERITY for i in sorted(np.flatnonzero(cats == cat), key=lambda j: -np.nan_to_num(k0[j]))]
    if not order:
        return ""
    labels = res.obs_labels(order[:TOP_OBS])
    tr, ev = _transforms(res), _evidence(res)
    reason, k1 = _strings(getattr(res, "reason", None), n, ""), _flat(res.pareto_k)
    se = _flat(res.mcse_elpd_i) if getattr(res, "mcse_elpd_i", None) is not None else np.full(n, np.nan)
    elpd, rows = _flat(res.elpd_i), []
    for i, label in zip(order[:TOP_OBS], labels):
        cat = cats[i]
        rows.append((cat, [_label_cell(label, i), f'<td class="text cat-{cat}" data-col="category" '
                           f'data-value="{cat}">{escape(SHORT[cat])}</td>', _text(tr[i]), _text(ev[i]),
                           _cell("k_psis", k0[i]), _cell("k", k1[i]), _cell("elpd_i", elpd[i]),
                           _cell("mcse_elpd_i", se[i]), _text(reason[i])]))
    header = ["observation", "what happened", "transform", "evidence", "k plain PSIS", "k reported",
              "elpd_i", "mcse", "why doubtful"]
    more = (f" The first {TOP_OBS} of {len(order)} are listed." if len(order) > TOP_OBS else "")
    body = "\n".join(f'<tr class="cat-{cat}" data-category="{cat}">' + "".join(r) + "</tr>" for cat, r in rows)
    head = "".join(f'<th class="text">{escape(h)}</th>' for h in header)
    return (_note(f"The {len(order)} observations of {name} not plain PSIS, doubtful first.{more}")
            + f'<div class="scroll"><table id="obs-{escape(name)}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n'
              "</tbody>\n</table></div>")


def _text(value):
    return f'<td class="text">{escape(str(value))}</td>'


def _label_cell(label, i):
    """An observation's cell: its label as the user names it (:meth:`LooResult.obs_labels`), its flat position
    (0-based, in the order of ``res.elpd_i.values.ravel()``) only as the ``data-index`` attribute."""
    return f'<td class="text" data-col="observation" data-index="{int(i)}">{escape(str(label))}</td>'


def _numbering(res):
    """``(x, xlabel)``: each observation's number on the figures' x axes, as the user numbers it: 1-based for
    Stan draws (``log_lik[1]`` at 1), the coordinate values of a single numeric observation dim, else the 0-based
    position."""
    n = int(np.asarray(res.elpd_i.values).size)
    da = res.elpd_i
    if getattr(res, "stan_labels", False):
        name = res.var_name or "log_lik"
        return np.arange(1, n + 1), f"Data Point (as {name}[n], 1-based)"
    if da.ndim == 1 and da.dims[0] in da.coords and np.issubdtype(da.coords[da.dims[0]].dtype, np.number):
        return np.asarray(da.coords[da.dims[0]].values), f"Data Point ({da.dims[0]})"
    return np.arange(n), "Data Point (position, 0-based)"


def _flag_text(cat, tr, ev):
    """An observation's category in a table cell: with the proposal or the evidence where it has one."""
    detail = {"adapted": tr, "second_opinion": ev}.get(cat)
    return SHORT[cat] + (f" ({detail})" if detail else "")


def _diff_html(named, best, cats):
    if len(named) == 1:
        return None
    parts = [_note(f"Differences elpd_i[model] - elpd_i[{best}] against the best model (rank 0); orange: "
                   "observations not plain PSIS (adapted, second opinion, refit or doubtful) in either model. "
                   f"The table lists the {TOP} observations with the largest |difference|.")]
    ref = named[best]
    ref_elpd, ref_tr, ref_ev = _flat(ref.elpd_i), _transforms(ref), _evidence(ref)
    labels = ref.obs_labels()
    for name, res in named.items():
        if name == best:
            continue
        elpd, tr, ev = _flat(res.elpd_i), _transforms(res), _evidence(res)
        diff = elpd - ref_elpd
        flagged = (cats[name] != "psis") | (cats[best] != "psis")
        drawn = elpd_diff_figure(diff, flagged, f"{name} - {best}", *_numbering(ref))
        rows = []
        for i in np.argsort(-np.abs(diff), kind="stable")[:TOP]:
            rows.append([_label_cell(labels[i], i), _cell("diff", diff[i]),
                         _cell("elpd_best", ref_elpd[i]), _cell("elpd_model", elpd[i]),
                         _text(_flag_text(cats[best][i], ref_tr[i], ref_ev[i])),
                         _text(_flag_text(cats[name][i], tr[i], ev[i]))])
        line = (f"{name} - {best}: total {diff.sum():.2f}, of which {diff[flagged].sum():.2f} from "
                f"{int(flagged.sum())} observations not plain PSIS in either model.")
        header = ["observation", "difference", f"elpd_i {best}", f"elpd_i {name}", f"what happened in {best}",
                  f"what happened in {name}"]
        parts.append(f"<h3>{escape(name)} vs {escape(best)}</h3>\n<p>{escape(line)}</p>\n"
                     f'<img src="{drawn.uri}" alt="{escape(f"elpd differences of {name}")}" '
                     f'data-legend="{_attr_json(drawn.legend)}" '
                     f'data-legend-outside="{str(drawn.legend_outside).lower()}">\n'
                     + _table(header, rows, table_id=f"diff-{name}"))
    return "\n".join(parts)


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


def _pit_test(tree, var):
    """The uniformity test ``arviz_plots.plot_loo_pit`` annotates (its default ``method="pot_c"``: Pareto-smoothed
    LOO-PIT values, ``arviz_stats``' uniformity test over every observation): ``(p-value, alpha)``, alpha being
    1 - ``rcParams["stats.envelope_prob"]`` as there."""
    pit = azs.loo_pit(tree, var_names=[var], pareto_pit=True)
    p_values = pit.azstats.uniformity_test(dim=list(pit[var].dims), method="pot_c")[0]
    return float(p_values[var]), 1.0 - float(rcParams["stats.envelope_prob"])


def _p_text(p):
    return f"{p:.2f}" if p >= 0.01 else f"{p:.2g}"


def _pit_sentence(var, p, alpha):
    """The uniformity test's result in words."""
    if p < alpha:
        return (f"The LOO-PIT values of {var} are not uniform (uniformity test p-value {_p_text(p)} < {alpha:g}): "
                "the LOO predictive distributions are miscalibrated for these observations.")
    return (f"The LOO-PIT values of {var} are consistent with a uniform distribution (uniformity test p-value "
            f"{_p_text(p)}, not below {alpha:g}): no sign that the LOO predictive distributions are miscalibrated.")


#: the seed of the randomized LOO-PIT of discrete outcomes in the report (a page is reproducible)
PIT_SEED = 0


def _adapted_pit(name, res, tree, model):
    """``(html or None, why not)``: the LOO-PIT panel with the adapted weights (:func:`ppl_loo.loo_pit`) of a model
    given in ``models``; None and the reason where ``pl.loo_pit`` cannot run (no predictive CDF, no data)."""
    if model is None or tree is None:
        return None, None
    try:
        pit = loo_pit(tree, res, model=model, random_seed=PIT_SEED)
        var = _var_name(res, tree) or "y"
        uri, labels = pit_values_figure(pit, var)
        p_value = float(xr.Dataset({var: pit}).azstats.uniformity_test(dim=list(pit.dims), method="pot_c")[0][var])
    except (ValueError, TypeError, NotImplementedError) as err:
        return None, str(err)
    alpha = 1.0 - float(rcParams["stats.envelope_prob"])
    used = np.asarray(pit.weights.values).astype(str)
    sentence = _pit_sentence(var, p_value, alpha) + (
        f" Computed with the adapted weights (pl.loo_pit: the exact predictive CDF; {int(np.sum(used == 'adapted'))} "
        f"observations adapted, {int(np.sum(np.isin(used, ('refit', 'mixture'))))} with their refit or mixture "
        "draws).")
    return (f"<h3>{escape(name)}</h3>\n"
            f'<p class="pit-test" data-p-value="{p_value!r}" data-alpha="{alpha!r}" data-weights="adapted">'
            f"{escape(sentence)}</p>\n"
            f'<img src="{uri}" alt="{escape(f"LOO-PIT of {name} ({var})")}" data-axes="{_attr_json(labels)}">'), None


def _pit_model(name, res, tree, model=None):
    """``(html, shown)``: the model's LOO-PIT panel and sentence (with the adapted weights where the model is
    given and has a predictive CDF, else ``arviz_plots.plot_loo_pit``'s plain PSIS weights); a note when it
    cannot be drawn (``shown``: False when there is no data for it, which alone does not make the section worth
    showing)."""
    html, why = _adapted_pit(name, res, tree, model)
    if html is not None:
        return html, True
    reason, var, plotted = _pit_reason(res, tree)
    if reason is not None:
        return f"<h3>{escape(name)}</h3>\n" + _note(f"No LOO-PIT for {name}: {reason}."), False
    try:
        uri, labels = loo_pit_figure(plotted, var)
        p, alpha = _pit_test(plotted, var)
    except Exception as err:  # noqa: BLE001 - a plot that fails is reported, the report still written
        return (f"<h3>{escape(name)}</h3>\n"
                + _note(f"No LOO-PIT for {name}: arviz_plots.plot_loo_pit failed: {type(err).__name__}: {err}."), True)
    plain = " Computed with plain PSIS weights" + (f" (pl.loo_pit could not run: {why})." if why else ".")
    return (f"<h3>{escape(name)}</h3>\n"
            f'<p class="pit-test" data-p-value="{p!r}" data-alpha="{alpha!r}" data-weights="plain">'
            f"{escape(_pit_sentence(var, p, alpha) + plain)}</p>\n"
            f'<img src="{uri}" alt="{escape(f"LOO-PIT of {name} ({var})")}" data-axes="{_attr_json(labels)}">'), True


def _pit_html(named, trees, models):
    made = [_pit_model(name, res, trees.get(name), models.get(name)) for name, res in named.items()]
    if not any(shown for _, shown in made):
        return None
    head = _note("LOO-PIT with the adapted weights for the models given in models= whose observation model has a "
                 "CDF (pl.loo_pit: the exact predictive CDF under the weights each elpd_i used; randomized for a "
                 "discrete outcome, seed 0); for the others arviz_plots.plot_loo_pit, with plain PSIS weights. Each "
                 "curve is the ECDF of the LOO-PIT values minus the uniform CDF: near 0 for calibrated predictions; "
                 "below 0 then above, predictive distributions too wide; above 0 then below, too narrow; mostly of "
                 "one sign, biased.")
    return head + "\n" + "\n".join(html for html, _ in made)


def _roc_html(named, trees, models):
    parts = []
    for name, res in named.items():
        if name not in models:
            continue
        head = f"<h3>{escape(name)}</h3>\n"
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
    return "\n".join(parts) or None


def _pvi_html(named, trees):
    parts = []
    cols = ("pvi_mean", "pvi_sd", "vi_mean", "vi_sd", "sd_ratio", "flagged")
    for name in named:
        tree = trees.get(name)
        if tree is None or "pvi" not in tree.children:
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
    return "\n".join(parts) or None


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
        rows.append([f'<th scope="row" class="text">{escape(name)}</th>',
                     f'<td class="text">{escape(str(res.var_name))}</td>',
                     _cell("n_samples", res.n_samples), _cell("n_data_points", res.n_data_points),
                     _cell("good_k", res.good_k), _cell("max_rhat", res.max_rhat),
                     f'<td class="text">{escape(str(res.approximation or "none (posterior draws)"))}</td>',
                     f'<td class="text"><pre>{escape(config)}</pre></td>'])
    header = ["model", "var_name", "draws", "observations", "good_k", "max_rhat", "approximation", "engine_config"]
    versions = [[f'<td class="text">{escape(k)}</td>', f'<td class="text">{escape(v)}</td>']
                for k, v in _versions().items()]
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (_table(header, rows, table_id="settings-table") + "\n<h3>Versions</h3>\n"
            + _table(["package", "version"], versions, table_id="versions-table") + f"\n<p>Written {escape(date)}.</p>")
