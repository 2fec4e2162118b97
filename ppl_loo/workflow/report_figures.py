"""The figures of ``pl.report`` as ``data:image/png;base64`` URIs (matplotlib, no pyplot state touched
except by ``arviz_plots``, whose figures are closed after use)."""

from __future__ import annotations

import base64
import io

import numpy as np

__all__ = ["png_uri", "khat_figure", "elpd_diff_figure", "roc_figure", "loo_pit_figure"]

DPI = 80


def _figure(ncols=1, width=5.0, height=3.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def png_uri(fig):
    """The figure as a ``data:image/png;base64,...`` URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _thresholds(ax, good_k):
    ax.axhline(0.7, color="tab:red", ls="--", lw=1, label="0.7")
    if good_k is not None and abs(good_k - 0.7) > 1e-9:
        ax.axhline(good_k, color="tab:orange", ls=":", lw=1, label=f"good_k {good_k:.2f}")


def khat_figure(k_before, k_after, adapted, good_k, title):
    """Pareto k of plain PSIS and after adaptation against the observation index (adapted ones in orange).

    A NaN k-hat (no importance sampling: a refit, mixture or SMC estimate) is not a value: it is drawn as a
    grey tick on the bottom edge, outside the k scale, never as a point at 0."""
    fig, (a0, a1) = _figure(2)
    idx = np.arange(k_after.size)
    for ax, k, label in ((a0, k_before, "plain PSIS"), (a1, k_after, "after adaptation")):
        if k is None:
            ax.text(0.5, 0.5, "not available", ha="center", transform=ax.transAxes)
            continue
        k = np.asarray(k, dtype=float)
        nan = np.isnan(k)
        ax.scatter(idx[~adapted & ~nan], k[~adapted & ~nan], s=14, color="tab:blue", label="not adapted")
        ax.scatter(idx[adapted & ~nan], k[adapted & ~nan], s=18, color="tab:orange", marker="D", label="adapted")
        if nan.any():  # x in data, y in axes coordinates: the k scale is not stretched to hold them
            ax.plot(idx[nan], np.zeros(int(nan.sum())), ls="none", marker="|", ms=10, color="0.4", clip_on=False,
                    transform=ax.get_xaxis_transform(), label="no k-hat (refit, mixture, SMC)")
        _thresholds(ax, good_k)
        ax.set(xlabel="observation", ylabel="Pareto k", title=f"{title}: {label}")
    a1.legend(fontsize=7, loc="best")
    return png_uri(fig)


def elpd_diff_figure(diff, flagged, title):
    """Pointwise ``elpd_i[model] - elpd_i[best]`` against the observation index, flagged ones in orange."""
    fig, (ax,) = _figure(1, width=7.0)
    idx = np.arange(diff.size)
    ax.axhline(0.0, color="0.5", lw=1)
    ax.scatter(idx[~flagged], diff[~flagged], s=14, color="tab:blue", label="PSIS in both")
    ax.scatter(idx[flagged], diff[flagged], s=18, color="tab:orange", marker="D",
               label="adapted, doubtful or refit in either")
    ax.set(xlabel="observation", ylabel="elpd_i difference", title=title)
    ax.legend(fontsize=7, loc="best")
    return png_uri(fig)


def roc_figure(roc, title):
    """LOO ROC and precision-recall curves of a :class:`~ppl_loo.LooROC`."""
    fig, (a0, a1) = _figure(2, width=4.0, height=3.6)
    a0.plot(roc.fpr, roc.tpr, color="tab:blue")
    a0.plot([0, 1], [0, 1], color="0.6", ls="--", lw=1)
    a0.set(xlabel="false positive rate", ylabel="true positive rate", title=f"{title}: ROC, AUC {roc.auc:.3f}")
    a1.step(roc.recall, roc.precision, where="post", color="tab:green")
    a1.axhline(float(np.mean(roc.y)), color="0.6", ls="--", lw=1)
    a1.set(xlabel="recall", ylabel="precision", title=f"PR, average precision {roc.average_precision:.3f}")
    return png_uri(fig)


def loo_pit_figure(tree, var_name):
    """``arviz_plots.plot_loo_pit`` (plain PSIS weights) for one variable."""
    import arviz_plots as azp
    import matplotlib.pyplot as plt

    pc = azp.plot_loo_pit(tree, var_names=[var_name], backend="matplotlib")
    fig = pc.viz["figure"].item() if hasattr(pc.viz["figure"], "item") else pc.viz["figure"]
    try:
        return png_uri(fig)
    finally:
        plt.close(fig)
