"""Table 1 of 001: observations left above k = 0.7 after each transformation set, over resamplings.

For each resampling (``s`` draws without replacement from the retained MCMC draws), one
``pl.loo(data, model, search={"transforms": <all eleven>, "hbar": 4^-r (r = 0..10)}, k_threshold=0.7)`` call
with the closed-form JAX model (exact Jacobians) evaluates every (transformation, hbar) candidate
of every observation whose plain-PSIS k is above 0.7 (and of those flagged for a large
log-likelihood variance). From ``res.candidates`` we count, per transformation set, the
observations whose plain k is above 0.7 and whose k stays above 0.7 for *every* candidate of the
set (the papers' "at least one of the ticked transformations" succeeding means not counted):

- papers' criterion: ``k_weights`` (k-hat of the importance weights alone, as in the papers);
- project's criterion: ``k`` (the larger of the weights' k-hat and the elpd numerator's k-hat).

Besides, the engine's own final answer (which also requires an invertible map at every draw and
an effective sample size of at least min(100, S/10)) is counted: observations whose final
``pareto_k`` is above 0.7, and observations marked ``doubtful``. The search runs alone (no
second opinions): Table 1 counts what the transformations reach; the second opinions ``pl.loo`` adds by default
are scored against refits of this model in ``benchmarks/results/truth`` (row ``ovarian_lr``).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from ovarian_common import (
    ALL_TRANSFORMS,
    HBAR,
    PAPERS_FOUR,
    PAPERS_SEVEN,
    PROJECT_EXTRA,
    THRESHOLD,
    jax_model,
    load_json,
    log,
    save_json,
)

#: rows of the table: (label, transformation set); () is plain PSIS
ROWS = (
    [("none (plain PSIS)", ())]
    + [(t.upper(), (t,)) for t in PAPERS_SEVEN]
    + [("papers' four: PMM1+PMM2+KL+Var", PAPERS_FOUR), ("papers' seven: all", PAPERS_SEVEN)]
    + [(f"{t} (project)", (t,)) for t in PROJECT_EXTRA]
    + [("papers' seven + MM3", PAPERS_SEVEN + ("mm3",)), ("all eleven (project default)", ALL_TRANSFORMS)]
)


def row_key(ts):
    return "+".join(ts) if ts else "none"


def min_k_by_transform(cand, labels, key):
    """``(n, T)`` minimum over the hbar grid of each transformation's k (NaN -> inf)."""
    k = np.where(np.isfinite(cand[key]), cand[key], np.inf)
    names = np.array([lab[0] for lab in labels])
    return np.stack([np.min(k[:, names == t], axis=1) for t in ALL_TRANSFORMS], axis=1)


def count_failures(k_psis, mink, ts, threshold=THRESHOLD):
    """Observations with plain k above the threshold and every candidate of ``ts`` above it."""
    bad = k_psis > threshold
    if ts:
        cols = [ALL_TRANSFORMS.index(t) for t in ts]
        bad &= np.min(mink[:, cols], axis=1) > threshold
    return int(np.sum(bad))


def one_resampling(pl, draws, model, idx):
    data = draws.tree(idx, model)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, k_threshold=THRESHOLD, progressbar=False,
                     search={"transforms": list(ALL_TRANSFORMS), "hbar": HBAR}, second_opinions={"mixture": False,
                                                                                                 "smc": False})
    wall = time.perf_counter() - t0
    cand = res.candidates
    k_psis = np.asarray(res.pareto_k_psis).ravel()
    mink_w = min_k_by_transform(cand, cand["labels"], "k_weights")
    mink = min_k_by_transform(cand, cand["labels"], "k")
    adapted = ~np.all(np.isnan(cand["k"]), axis=1)
    return {
        "wall_s": wall,
        "n_adapted": int(np.sum(adapted)),
        "k_psis": k_psis,
        "min_k_weights": mink_w,
        "min_k": mink,
        "counts_papers": {row_key(ts): count_failures(k_psis, mink_w, ts) for _, ts in ROWS},
        "counts_project": {row_key(ts): count_failures(k_psis, mink, ts) for _, ts in ROWS},
        "engine_final_above": int(np.sum(np.asarray(res.pareto_k).ravel() > THRESHOLD)),
        "engine_final_failed": int(np.sum(np.asarray(res.transform).ravel() == "failed")),
        "engine_final_doubtful": int(np.sum(np.asarray(res.doubtful).ravel())),
        "elpd_psis": float(np.sum(_psis_elpd(res, data, model))),
        "elpd_adaptive": float(res.elpd),
        "transform_used": [str(t) for t in np.asarray(res.transform).ravel()],
    }


def _psis_elpd(res, data, model):
    """Plain-PSIS elpd_i recomputed from the result's stored PSIS weights and the model's log-likelihood."""
    from diagnose import engine_arrays
    from scipy.special import logsumexp

    _, ll, lw_psis = engine_arrays(res, data, model)
    return logsumexp(lw_psis + ll.T, axis=1)


def run(cfg, cdir, out, logfile, models):
    from resample import Draws, resample_index
    from run import fit_path

    import ppl_loo as pl

    for name in models:
        path = cdir / f"table1_{name}.json"
        done = load_json(path) if path.exists() else {"model": name, "resamplings": []}
        draws = Draws(fit_path(cdir, name), name)
        model = jax_model(name)
        R, s = cfg["resamplings"][name], cfg["s"]
        log(f"table1 {name}: {R} resamplings of s = {s} of {draws.n_total} draws; {len(done['resamplings'])} cached",
            logfile)
        for r in range(len(done["resamplings"]), R):
            one = one_resampling(pl, draws, model, resample_index(draws.n_total, s, r))
            one["r"] = r
            done["resamplings"].append(one)
            save_json(path, done)  # after each resampling: an interrupted run resumes here
            c = one["counts_papers"]
            log(f"table1 {name} r={r}: plain {c['none']}, papers' four {c[row_key(PAPERS_FOUR)]}, all seven "
                f"{c[row_key(PAPERS_SEVEN)]}, engine final {one['engine_final_above']}; {one['wall_s']:.1f} s", logfile)
        done["settings"] = {"s": s, "resamplings": R, "hbar": HBAR, "transforms": ALL_TRANSFORMS,
                            "threshold": THRESHOLD, "k_threshold_of_call": THRESHOLD,
                            "n_retained_draws": draws.n_total}
        save_json(path, done)
