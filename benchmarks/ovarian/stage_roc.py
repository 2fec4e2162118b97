"""LOO ROC and precision-recall curves with AUC, MCMC vs mean-field ADVI (the papers' Fig. 3).

The LOO predicted probability of each observation is ``E_{-i}[sigmoid(mu_i)]`` (Eq. 8) with the
method's weights, equal to ``exp(elpd_i)`` for ``y_i = 1`` and ``1 - exp(elpd_i)`` for ``y_i = 0``
(checked against ``pl.loo_expectations`` in the peers stage). MCMC: the first resampling of the
peers stage (``s`` draws), adaptive (``ppl_loo``) and plain PSIS; ADVI: the variational draws,
adaptive and plain Eq. 13 weights. Curves and areas use ``ppl_loo.workflow.downstream.loo_roc``
(scikit-learn conventions: ties count 1/2 in the AUC; average precision = sum (R_k - R_k-1) P_k).
"""

from __future__ import annotations

import numpy as np
from ovarian_common import MODEL_LABEL, jax_model, load_json, log, save_json


def p_from_elpd(elpd_i, y):
    e = np.exp(np.asarray(elpd_i, dtype=float))
    return np.where(np.asarray(y) == 1, e, 1.0 - e)


def curves(y, p):
    from ppl_loo.workflow.downstream.loo_roc import average_precision, precision_recall_curve, roc_auc, roc_curve

    fpr, tpr, _ = roc_curve(y, p)
    prec, rec, _ = precision_recall_curve(y, p)
    return {"auc": float(roc_auc(y, p)), "average_precision": float(average_precision(y, p)), "fpr": fpr, "tpr": tpr,
            "precision": prec, "recall": rec}


def run(cfg, cdir, out, logfile, models):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    fig3, axes3 = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.6), squeeze=False)
    for col, name in enumerate(models):
        y = np.asarray(jax_model(name).y)
        peers0 = load_json(cdir / f"peers_{name}.json")["resamplings"][0]
        advi = load_json(cdir / f"advi_{name}.json")
        sets = {
            "MCMC, adaptive (ppl_loo)": peers0["ppl_loo"]["elpd_i"],
            "MCMC, plain PSIS": peers0["arviz_plain"]["elpd_i"],
            "ADVI, adaptive (Eq. 13)": advi["elpd_i"],
            "ADVI, plain IS (Eq. 13)": advi["elpd_i_plain"],
            "ADVI, q as posterior (plain PSIS)": advi["elpd_i_q_as_posterior"],
        }
        res = {k: curves(y, p_from_elpd(v, y)) for k, v in sets.items()}
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.4))
        styles = {"MCMC, adaptive (ppl_loo)": ("C0", "-"), "MCMC, plain PSIS": ("C0", ":"),
                  "ADVI, adaptive (Eq. 13)": ("C3", "-"), "ADVI, plain IS (Eq. 13)": ("C3", ":"),
                  "ADVI, q as posterior (plain PSIS)": ("C2", "--")}
        for k, c in res.items():
            color, ls = styles[k]
            ax1.plot(c["fpr"], c["tpr"], color=color, ls=ls, label=f"{k}: AUC {c['auc']:.3f}")
            ax2.step(c["recall"], c["precision"], where="post", color=color, ls=ls,
                     label=f"{k}: AP {c['average_precision']:.3f}")
            if "adaptive" in k:
                axes3[0, col].plot(c["fpr"], c["tpr"], color=color, label=f"{k.split(',')[0]} (AUC {c['auc']:.3f})")
        ax1.plot([0, 1], [0, 1], color="0.7", lw=0.8)
        ax1.set(xlabel="false positive rate", ylabel="true positive rate", title=f"LOO ROC, {MODEL_LABEL[name]}")
        ax2.set(xlabel="recall", ylabel="precision", title=f"LOO precision-recall, {MODEL_LABEL[name]}")
        for ax in (ax1, ax2):
            ax.legend(fontsize=7, loc="lower right" if ax is ax1 else "lower left")
        fig.tight_layout()
        png = out / f"roc_pr_{name}.png"
        fig.savefig(png, dpi=120)
        plt.close(fig)
        axes3[0, col].plot([0, 1], [0, 1], color="0.7", lw=0.8)
        axes3[0, col].set(xlabel="false positive rate", ylabel="true positive rate",
                          title=f"({'ab'[col]}) {MODEL_LABEL[name]}")
        axes3[0, col].legend(fontsize=8, loc="lower right")
        summary[name] = {"png": str(png), **{k: {"auc": v["auc"], "average_precision": v["average_precision"]}
                                             for k, v in res.items()}}
        log(f"roc {name}: "
            + ", ".join(f"{k} AUC {v['auc']:.3f} AP {v['average_precision']:.3f}" for k, v in res.items()),
            logfile)
    fig3.tight_layout()
    fig3.savefig(out / "fig3_loo_roc.png", dpi=120)
    plt.close(fig3)
    summary["fig3_png"] = str(out / "fig3_loo_roc.png")
    save_json(cdir / "roc.json", summary)
