"""The figures of ``pl.report`` as ``data:image/png;base64`` URIs (matplotlib, no pyplot state touched
except by ``arviz_plots``, whose figures are closed after use).

Conventions of ``arviz_plots``: its colour cycle (``C0``, ``C1``, ...), its axis labels ("Data Point",
"Shape parameter k" of ``plot_khat``; the LOO-PIT value and the difference of its ECDF to the uniform CDF of
``plot_loo_pit``). Each figure also says what a reader of the page cannot see in its pixels (:class:`Drawn`):
its legend's entries, the y-range of each panel and whether the legend stays clear of the data.
"""

from __future__ import annotations

import base64
import io
from typing import NamedTuple

import numpy as np

__all__ = ["png_uri", "khat_figure", "elpd_diff_figure", "roc_figure", "loo_pit_figure", "Drawn", "STYLE",
           "PIT_XLABEL", "PIT_YLABEL"]

DPI = 100
#: the marker of each observation category (``ppl_loo.workflow.report.report.CATEGORIES``): colour, marker, size,
#: z-order; the doubtful ones large, red and on top
STYLE = {"psis": ("C0", "o", 14, 2), "adapted": ("C1", "D", 22, 3), "second_opinion": ("C2", "s", 26, 3),
         "refit": ("C4", "P", 60, 4), "doubtful": ("C3", "X", 110, 5)}
#: the LOO-PIT panel's axis labels (``arviz_plots.plot_loo_pit`` draws the Δ-ECDF of the LOO-PIT values)
PIT_XLABEL = "LOO-PIT value"
PIT_YLABEL = "ECDF difference (ECDF - uniform CDF)"
ANNOTATED = 8  # doubtful observations named next to their point, at most


class Drawn(NamedTuple):
    """A figure as drawn: the URI, its legend's entries in order, the y-limits of each panel, whether the
    legend lies outside every panel (clear of the data), and the x ticks each panel shows (within its limits)."""

    uri: str
    legend: tuple
    ylim: tuple
    legend_outside: bool
    xticks: tuple = ()


def _figure(ncols=1, width=5.0, height=3.2, sharey=False):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    return fig, fig.subplots(1, ncols, squeeze=False, sharey=sharey)[0]


def png_uri(fig):
    """The figure as a ``data:image/png;base64,...`` URI, cut to what is drawn (a legend below wider than the panels
    stays in the picture)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _legend_below(fig, axes, ncols=3):
    """One figure legend below the panels: one entry per label (the first handle drawn with it)."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    legend = fig.legend(list(handles.values()), list(handles), loc="outside lower center", fontsize=8,
                        ncols=min(ncols, max(len(handles), 1)), frameon=False)
    return legend, tuple(handles)


def _drawn(fig, axes, legend, labels):
    """Render the figure, then read back what :class:`Drawn` reports."""
    uri = png_uri(fig)
    fig.draw_without_rendering()
    box = legend.get_window_extent()
    outside = not any(box.overlaps(ax.get_window_extent()) for ax in axes)
    xticks = tuple(tuple(float(t) for t in ax.get_xticks() if min(ax.get_xlim()) <= t <= max(ax.get_xlim()))
                   for ax in axes)
    return Drawn(uri, labels, tuple(tuple(float(v) for v in ax.get_ylim()) for ax in axes), outside, xticks)


def _thresholds(ax, good_k):
    """One line per threshold: ``good_k`` (the one the result used), and 0.7 where it differs visibly."""
    ax.axhline(good_k, color="C3", ls="--", lw=1, alpha=0.7, label=f"k threshold {good_k:.2f} (good_k)")
    if good_k < 0.69:
        ax.axhline(0.7, color="0.4", ls=":", lw=1, alpha=0.7, label="k 0.7 (unreliable above, any sample size)")


def _observation_axis(ax, xlabel):
    """The x axis of a figure over the observations: its label, integer ticks only (observations are numbered)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _khat_panel(ax, k, k_plain, categories, labels, idx):
    """One panel: each category with its marker, at the observations' numbers ``idx``. A point without a k-hat in
    this panel (refit, mixture, SMC: no importance sampling) is a hollow marker (a line's marker, not a scatter
    point) at its plain-PSIS k, never at 0; one whose plain k-hat is missing too sits on the top edge, outside the
    k scale."""
    for cat, (color, marker, size, z) in STYLE.items():
        sel = categories == cat
        full, hollow, edge = sel & np.isfinite(k), sel & ~np.isfinite(k) & np.isfinite(k_plain), sel & np.isnan(k_plain)
        if full.any():
            ax.scatter(idx[full], k[full], s=size, color=color, marker=marker, zorder=z, linewidths=0.6,
                       edgecolors="black" if cat == "doubtful" else "none", label=f"{labels[cat]} ({int(sel.sum())})")
        if hollow.any():
            ax.plot(idx[hollow], k_plain[hollow], ls="none", marker=marker, ms=np.sqrt(size) + 1, mfc="none", mec=color,
                    mew=1.4, zorder=z, label=f"no k-hat after: {labels[cat]} ({int(hollow.sum())}), drawn at its "
                                         "plain-PSIS k")
        if edge.any():
            ax.plot(idx[edge], np.ones(int(edge.sum())), ls="none", marker="^", ms=7, color=color, clip_on=False,
                    transform=ax.get_xaxis_transform(), label=f"k-hat not estimated: {labels[cat]} (top edge)")


def khat_figure(k_before, k_after, categories, labels, good_k, title, obs_labels=(), x=None, xlabel="Data Point"):
    """Pareto k of plain PSIS and of the estimate reported, against the observation's number ``x`` (default its
    0-based position; the report passes the user's numbering: 1-based for Stan, the coordinate values of a DataTree
    with one numeric observation dim) on integer ticks, one marker per observation category (``categories``: a
    category key per observation; ``labels``: key -> legend text).

    Both panels share the y-scale. An observation without a k-hat after (refit, mixture or SMC) is drawn hollow
    at its plain-PSIS k; doubtful observations are named next to their point (``obs_labels``, at most
    :data:`ANNOTATED`). The legend (one entry per category present and per threshold) lies below the panels.
    """
    fig, axes = _figure(2, height=3.8, sharey=True)
    k_after = np.asarray(k_after, dtype=float)
    k_plain = k_after if k_before is None else np.asarray(k_before, dtype=float)
    panels = (("plain PSIS" if k_before is not None else "plain PSIS (not stored: the k-hat reported)", k_plain),
              ("after adaptation (estimate reported)", k_after))
    idx = np.arange(k_after.size) if x is None else np.asarray(x)
    for ax, (panel, k) in zip(axes, panels):
        _khat_panel(ax, k, k_plain, categories, labels, idx)
        _thresholds(ax, good_k)
        ax.set(title=panel)
        _observation_axis(ax, xlabel)
    axes[0].set_ylabel("Shape parameter k")
    axes[0].margins(y=0.12)  # room above the highest point for its name
    for i in np.flatnonzero(categories == "doubtful")[:ANNOTATED] if len(obs_labels) else ():
        y = k_after[i] if np.isfinite(k_after[i]) else k_plain[i]
        if np.isfinite(y):
            axes[1].annotate(str(obs_labels[i]), (idx[i], y), xytext=(5, 4), textcoords="offset points", fontsize=7,
                             color="C3")
    fig.suptitle(title, fontsize=10)
    legend, entries = _legend_below(fig, axes)
    return _drawn(fig, axes, legend, entries)


def elpd_diff_figure(diff, flagged, title, x=None, xlabel="Data Point"):
    """Pointwise ``elpd_i[model] - elpd_i[best]`` against the observation's number ``x`` (as :func:`khat_figure`);
    in orange the observations not plain PSIS (adapted, second opinion, refit or doubtful) in either model. Legend
    below the panel."""
    fig, (ax,) = _figure(1, width=7.0, height=3.4)
    idx = np.arange(diff.size) if x is None else np.asarray(x)
    ax.axhline(0.0, color="0.5", lw=1)
    for sel, style, label in ((~flagged, {"s": 14, "color": "C0"}, "plain PSIS in both"),
                              (flagged, {"s": 20, "color": "C1", "marker": "D"},
                               "adapted, second opinion, refit or doubtful in either")):
        if sel.any():  # no legend entry for no point
            ax.scatter(idx[sel], diff[sel], label=f"{label} ({int(sel.sum())})", **style)
    ax.set(ylabel="elpd_i difference", title=title)
    _observation_axis(ax, xlabel)
    legend, entries = _legend_below(fig, [ax], ncols=2)
    return _drawn(fig, [ax], legend, entries)


def roc_figure(roc, title):
    """LOO ROC and precision-recall curves of a :class:`~ppl_loo.LooROC`."""
    fig, (a0, a1) = _figure(2, width=4.0, height=3.6)
    a0.plot(roc.fpr, roc.tpr, color="C0")
    a0.plot([0, 1], [0, 1], color="0.6", ls="--", lw=1)
    a0.set(xlabel="false positive rate", ylabel="true positive rate", title=f"{title}: ROC, AUC {roc.auc:.3f}")
    a1.step(roc.recall, roc.precision, where="post", color="C2")
    a1.axhline(float(np.mean(roc.y)), color="0.6", ls="--", lw=1)
    a1.set(xlabel="recall", ylabel="precision", title=f"PR, average precision {roc.average_precision:.3f}")
    return png_uri(fig)


def pit_values_figure(pit, var_name):
    """``arviz_plots.plot_ecdf_pit`` of LOO-PIT values already computed (:func:`ppl_loo.loo_pit`, the adapted
    weights), labelled and without the annotation as :func:`loo_pit_figure`. Returns ``(uri, labels)``."""
    import arviz_plots as azp
    import matplotlib.pyplot as plt
    import xarray as xr

    visuals = {"xlabel": {"text": PIT_XLABEL}, "ylabel": {"text": PIT_YLABEL}}
    dt = xr.DataTree.from_dict({"loo_pit": xr.Dataset({var_name: pit})})
    pc = azp.plot_ecdf_pit(dt, group="loo_pit", sample_dims=list(pit.dims), backend="matplotlib", visuals=visuals)
    fig = pc.viz["figure"].item() if hasattr(pc.viz["figure"], "item") else pc.viz["figure"]
    try:
        for ax in fig.axes:
            for text in list(ax.texts):
                if text.get_text().startswith("p="):
                    text.remove()
        fig.set_size_inches(5.5, 3.4)
        fig.set_layout_engine("constrained")
        labels = tuple((ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes)
        return png_uri(fig), labels
    finally:
        plt.close(fig)


def loo_pit_figure(tree, var_name):
    """``arviz_plots.plot_loo_pit`` (plain PSIS weights) for one variable, its axes labelled
    (:data:`PIT_XLABEL`, :data:`PIT_YLABEL`) and without its ``p=...(α=...)`` annotation: the report says
    the uniformity test's result in a sentence. Returns ``(uri, ((xlabel, ylabel) of each panel))``."""
    import arviz_plots as azp
    import matplotlib.pyplot as plt

    visuals = {"xlabel": {"text": PIT_XLABEL}, "ylabel": {"text": PIT_YLABEL}}
    pc = azp.plot_loo_pit(tree, var_names=[var_name], backend="matplotlib", visuals=visuals)
    fig = pc.viz["figure"].item() if hasattr(pc.viz["figure"], "item") else pc.viz["figure"]
    try:
        for ax in fig.axes:
            for text in list(ax.texts):
                if text.get_text().startswith("p="):  # the uniformity test's annotation: said in words instead
                    text.remove()
        fig.set_size_inches(5.5, 3.4)
        fig.set_layout_engine("constrained")  # the x label inside the picture
        labels = tuple((ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes)
        return png_uri(fig), labels
    finally:
        plt.close(fig)
