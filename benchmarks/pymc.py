"""PyMC adapter speed on the ovarian logistic regression (n = 54, p = 1536).

    .venv/bin/python benchmarks/pymc.py

1. ``ppl_loo.loo`` with the model written in PyMC (adapter: PyTensor graphs compiled to JAX; the
   adapter detects the Bernoulli-logit linear predictor in the graph, so the engine uses the same
   closed-form Jacobians and line evaluation through the linear predictor) versus the closed-form
   :class:`ppl_loo.models.LogisticRegression`, on the same draws, all transformations
   (``transforms="all"``) over the full step grid, every observation adapted
   (``k_threshold=-inf``): cold (first call: adapter construction and JIT compilation included;
   the ``pymc.Model`` passed directly) and compiled (adapter reused; fastest of three interleaved
   repeats of each model).
2. ``ppl_loo.loo`` versus ``arviz_stats.loo(..., moment_match=True, model=pymc_model)`` on the same
   draws, default thresholds: wall time, seconds per adapted observation, observations left above
   the k threshold. If arviz's moment matching would take more than ~10 minutes (estimated from
   its first observation), it runs on a subset of the flagged observations (reported).

The draws come once from the closed-form model (``sample_nuts``, 2 chains x 500 draws after 300
warm-up, seed 1); the PyMC model has the same priors (``beta0 ~ N(0, 5^2)``, ``beta_j ~ N(0, 1)``)
and the same variable names. Prints a table and writes ``benchmarks/results/pymc.json``.
"""

import json
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)

# this file is named pymc.py: keep its folder off the import path so `import pymc` finds PyMC
_here = str(Path(__file__).resolve().parent)
sys.path[:] = [q for q in sys.path if q not in ("", ".", _here) and Path(q or ".").resolve() != Path(_here)]

BUDGET_S = 300.0  # arviz moment matching budget before falling back to a subset
REPEATS = 3  # compiled timings: interleaved repeats, fastest kept


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def n_above(res):
    return int((np.asarray(res.pareto_k) > res.good_k).sum())


def n_adapted(res):
    return int(np.sum(np.asarray(res.transform.values) != "psis"))


def main():
    import arviz_stats as azs
    import pymc as pm
    import xarray as xr
    from arviz_stats.loo import loo_moment_match

    import ppl_loo as pl
    from ppl_loo.adapters.pymc.adapter import PyMCModel
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.models import LogisticRegression
    from ppl_loo.sampling import sample_nuts

    warnings.filterwarnings("ignore")
    X, y = load_ovarian()
    n, p = X.shape
    lr = LogisticRegression(X, y, prior="normal")  # beta0 ~ N(0, 5^2), beta_j ~ N(0, 1)
    dt_lr, t_sample = timed(lambda: sample_nuts(lr, num_chains=2, num_warmup=300, num_samples=500, random_seed=1))

    with pm.Model(coords={"feature": np.arange(p), "obs_id": np.arange(n)}) as pm_model:
        beta0 = pm.Normal("beta0", 0, lr.scale_icept)
        beta = pm.Normal("beta", 0, lr.prior_scale, dims="feature")
        pm.Bernoulli("y", logit_p=beta0 + pm.math.dot(X, beta), observed=y, dims="obs_id")
    # the same draws as a PyMC-named posterior (PyMC's names and dims; log-likelihood of the draws)
    post = dt_lr["posterior"].to_dataset()
    dt = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"beta0": post["beta0"], "beta": post["beta"]}),
        "log_likelihood": dt_lr["log_likelihood"].to_dataset(),
        "observed_data": dt_lr["observed_data"].to_dataset(),
    })
    S = post.sizes["chain"] * post.sizes["draw"]

    rows = {"n": n, "p": p, "S": S, "sample_s": t_sample}
    # ------------------------------------------------------------- 1. adapter vs closed form, all obs
    from ppl_loo.workflow.loo.loo import DEFAULT_TRANSFORMS

    transforms = list(DEFAULT_TRANSFORMS)
    rows["transforms"] = transforms
    kw = {"k_threshold": -np.inf, "progressbar": False, "search": {"transforms": "all"}}
    r_lr1, t_lr1 = timed(lambda: pl.loo(dt_lr, lr, **kw))
    r_pm1, t_pm1 = timed(lambda: pl.loo(dt, pm_model, **kw))  # adapter built and compiled in the call
    adapter, t_adapter = timed(lambda: PyMCModel(pm_model))
    pl.loo(dt, adapter, **kw)
    # compiled: interleaved repeats, the fastest of each (the machine is shared; load drifts)
    t_lr_all, t_pm_all = [], []
    for _ in range(REPEATS):
        r_lr2, t = timed(lambda: pl.loo(dt_lr, lr, **kw))
        t_lr_all.append(t)
        r_pm2, t = timed(lambda: pl.loo(dt, adapter, **kw))
        t_pm_all.append(t)
    t_lr2, t_pm2 = min(t_lr_all), min(t_pm_all)
    rows["structure"] = adapter.structure_note
    rows["all_obs"] = {
        "closed_form_cold_s": t_lr1, "closed_form_compiled_s": t_lr2,
        "pymc_cold_s": t_pm1, "pymc_adapter_construction_s": t_adapter, "pymc_compiled_s": t_pm2,
        "closed_form_compiled_all_s": t_lr_all, "pymc_compiled_all_s": t_pm_all,
        "ratio_cold": t_pm1 / t_lr1, "ratio_compiled": t_pm2 / t_lr2,
        "elpd_closed_form": float(r_lr2.elpd), "elpd_pymc": float(r_pm2.elpd),
        "max_abs_diff_elpd_i": float(np.max(np.abs(r_pm2.elpd_i.values - r_lr2.elpd_i.values))),
        "max_abs_diff_pareto_k": float(np.max(np.abs(r_pm2.pareto_k.values - r_lr2.pareto_k.values))),
        "n_adapted": n_adapted(r_pm2),
    }

    # ------------------------------------------------------------- 2. ppl_loo vs arviz moment matching
    res, t_ours = timed(lambda: pl.loo(dt, adapter, progressbar=False))  # compiled above (same config)
    plain, t_plain = timed(lambda: azs.loo(dt, pointwise=True))
    thr = float(plain.good_k)
    flagged = np.flatnonzero(np.asarray(plain.pareto_k) > thr)
    n_psis_bad = int(flagged.size)

    def mm_on(idx):
        orig = azs.loo(dt, pointwise=True)
        mask = np.zeros(n, bool)
        mask[idx] = True
        k = orig.pareto_k.values.copy()
        k[~mask] = np.minimum(k[~mask], -np.inf)  # only idx are seen as problematic
        orig.pareto_k = orig.pareto_k.copy(data=k)
        return loo_moment_match(dt, orig, model=pm_model)

    subset_note = "all flagged observations"
    if flagged.size:
        mm_on(flagged[:1])  # warm-up: the first call compiles the model's PyTensor functions
        _, t_first = timed(lambda: mm_on(flagged[:1]))
        est = t_first * flagged.size
        rows["arviz_mm_estimate_s"] = est
        if est <= BUDGET_S:
            peer, t_peer = timed(lambda: azs.loo(dt, pointwise=True, moment_match=True, model=pm_model))
            peer_idx = flagged
            peer_above = n_above(peer)
            peer_k = np.asarray(peer.pareto_k)
        else:
            m = max(1, int(BUDGET_S // max(t_first, 1e-9)))
            peer_idx = flagged[:m]
            subset_note = f"subset: first {m} of {flagged.size} flagged observations (estimated {est:.0f} s for all)"
            peer, t_peer = timed(lambda: mm_on(peer_idx))
            peer_k = np.asarray(peer.pareto_k)
            peer_above = int((peer_k[peer_idx] > thr).sum())
    else:
        peer, t_peer, peer_idx, peer_above, peer_k = plain, t_plain, flagged, 0, np.asarray(plain.pareto_k)

    ours_k = np.asarray(res.pareto_k)
    adapted_ours = n_adapted(res)
    rows["default_threshold"] = {
        "k_threshold": thr,
        "n_above_plain_psis": n_psis_bad,
        "ppl_loo_s": t_ours,
        "ppl_loo_n_adapted": adapted_ours,
        "ppl_loo_s_per_adapted": t_ours / max(adapted_ours, 1),
        "ppl_loo_n_above": n_above(res),
        "ppl_loo_n_above_on_peer_subset": int((ours_k[peer_idx] > thr).sum()),
        "ppl_loo_elpd": float(res.elpd),
        "arviz_mm_s": t_peer,
        "arviz_mm_n_obs": int(len(peer_idx)),
        "arviz_mm_s_per_obs": t_peer / max(len(peer_idx), 1),
        "arviz_mm_n_above_on_its_obs": peer_above,
        "arviz_mm_elpd": float(peer.elpd),
        "arviz_mm_scope": subset_note,
    }

    a, d = rows["all_obs"], rows["default_threshold"]
    print(f"ovarian logistic regression, n = {n}, p = {p}, S = {S} (draws from the closed form, "
          f"sampled in {t_sample:.1f} s)\n")
    print(f"transforms: all {transforms}, hbar grid of 11 steps")
    print(f"PyMC adapter: {adapter.structure_note} (built in {t_adapter:.1f} s)")
    print("1. pl.loo, k_threshold=-inf (all 54 observations adapted), same draws")
    print(f"{'model':<36} {'cold [s]':>9} {'compiled [s]':>13} {'elpd':>10}")
    print(f"{'LogisticRegression (closed form)':<36} {t_lr1:>9.2f} {t_lr2:>13.2f} {a['elpd_closed_form']:>10.3f}")
    print(f"{'PyMC model':<36} {t_pm1:>9.2f} {t_pm2:>13.2f} {a['elpd_pymc']:>10.3f}")
    print(f"ratio PyMC / closed form: cold {a['ratio_cold']:.2f}x, compiled {a['ratio_compiled']:.2f}x; "
          f"max |elpd_i diff| {a['max_abs_diff_elpd_i']:.1e}, max |k diff| {a['max_abs_diff_pareto_k']:.1e}\n")
    print(f"2. default thresholds (k > {thr:.3f}; plain PSIS leaves {n_psis_bad} above)")
    print(f"{'method':<34} {'wall [s]':>9} {'obs adapted':>12} {'s / obs':>8} {'left above':>11} {'elpd':>10}")
    print(f"{'ppl_loo.loo(PyMC model)':<34} {t_ours:>9.1f} {adapted_ours:>12d} {d['ppl_loo_s_per_adapted']:>8.2f} "
          f"{d['ppl_loo_n_above']:>11d} {d['ppl_loo_elpd']:>10.3f}")
    print(f"{'arviz_stats.loo(moment_match)':<34} {t_peer:>9.1f} {len(peer_idx):>12d} {d['arviz_mm_s_per_obs']:>8.2f} "
          f"{peer_above:>11d} {d['arviz_mm_elpd']:>10.3f}")
    print(f"arviz scope: {subset_note}; ppl_loo leaves {d['ppl_loo_n_above_on_peer_subset']} of those above")
    out = Path(__file__).resolve().parent / "results" / "pymc.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
