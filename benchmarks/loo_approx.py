"""LOO from fast approximations on the ovarian data: Laplace, QNVB and Pathfinder draws through ``pl.loo``.

    .venv/bin/python benchmarks/loo_approx.py [--quick] [--problems ovarian_lr,ovarian_relu]

Prints a table and writes ``benchmarks/results/loo_approx.json`` (``--quick``: ``loo_approx_quick.json``,
fewer draws and steps).

Problems (the truth suite's, ``benchmarks/truth/problems.py``): ``ovarian_lr`` (regularized-horseshoe
logistic regression, 54 x 1536, d = 3075) and ``ovarian_relu`` (one-hidden-layer ReLU net, 3 units,
d = 4615). The truth is the committed one of the truth suite (``benchmarks/results/truth/<name>.json``:
bridge sampling over a refit of every observation), the MCMC answer the suite's ``ppl_loo`` row on the
NUTS fit (4 x 1000 draws; its wall time includes the NUTS fit).

Approximations (each gives draws of ``q`` and ``log q``; ``pl.loo`` then uses the Eq. 13 weights, the
adaptive proposals and the approximation's own proposals):

- ``laplace``: ``pl.laplace(None, model)``: the full Laplace with the GGN of the model's output plus the
  prior's curvature at the mode (the ReLU net: isotropic prior, exact through the rank-54
  Gauss-Newton factor). The horseshoe regression has no mode in its unconstrained space (its
  centred global scale runs to zero, the log density grows without bound): ``pl.laplace`` refuses
  it, and the table says so;
- ``qnvb``: ``pl.qnvb(None, model)`` (full batch, Hadamard, 2 pairs) with the package defaults;
- ``pathfinder``: BlackJAX ``vi.pathfinder.approximate`` (L-BFGS history 10, default settings) and
  its ``sample`` (draws and ``log q``), passed to ``pl.loo(..., log_q=...)``.

Per method: wall time of the fit and of ``pl.loo``, ``elpd_loo`` against the truth's sum, the mean
and largest absolute pointwise error, the number of doubtful observations, silent failures (off by
more than 3 combined Monte Carlo SEs without being doubtful), ``k`` of ``p/q``, and the observations
for which ``q`` alone was good enough (``approx_ok``). Timings are on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

import ppl_loo as pl
from ppl_loo.jax_settings import x64
from ppl_loo.workflow.approx.approx_tree import approximation_tree

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks" / "truth"))


def _problem(name):
    from problems import OvarianLR, OvarianRelu  # the truth suite's models

    return {"ovarian_lr": OvarianLR, "ovarian_relu": OvarianRelu}[name]()


def _truth(name):
    d = json.loads((RESULTS / "truth" / f"{name}.json").read_text())
    n = int(d["n_truth"])
    t = np.asarray([d["truth"][str(i)]["bridge"] for i in range(n)])
    se = np.asarray([d["truth"][str(i)]["bridge_mcse"] for i in range(n)])
    mc = d["pointwise"]["ppl_loo"]
    mcmc = {"elpd_i": np.asarray(mc["elpd_i"]), "mcse": np.asarray(mc["mcse"]), "doubtful": np.asarray(mc["doubtful"]),
            "wall_s": float(d["table"]["ppl_loo"]["wall_s"]) + float(d["fit"]["wall_s"])}
    return t, se, mcmc


def _pathfinder(model, draws, seed):
    import blackjax

    pm = pl.as_model(model)
    with x64():
        key = jax.random.key(seed)
        k0, k1, k2 = jax.random.split(key, 3)
        x0 = 0.1 * jax.random.normal(k0, (pm.dim,))
        t0 = time.perf_counter()
        state, _ = blackjax.vi.pathfinder.approximate(k1, pm.logp, x0)
        theta, lq = blackjax.vi.pathfinder.sample(k2, state, draws)
        theta, lq = np.asarray(theta), np.asarray(lq)
        wall = time.perf_counter() - t0
    return approximation_tree(pm, None, theta, "pathfinder", _empty_group(), "pathfinder"), lq, wall


def _empty_group():
    import xarray as xr

    return xr.Dataset(attrs={"method": "pathfinder"})


def _score(res, truth, truth_se):
    e = np.asarray(res.elpd_i.values).ravel()
    se = np.asarray(res.mcse_elpd_i.values).ravel()
    doubtful = np.asarray(res.doubtful.values).ravel()
    err = e - truth
    silent = (np.abs(err) > 3 * np.sqrt(se**2 + truth_se**2)) & ~doubtful
    ok = res.approx_ok
    return {"elpd": float(res.elpd), "truth_elpd": float(truth.sum()), "error_of_sum": float(err.sum()),
            "mean_abs_error": float(np.mean(np.abs(err))), "max_abs_error": float(np.max(np.abs(err))),
            "doubtful": int(doubtful.sum()), "silent_failures": int(silent.sum()),
            "mean_abs_error_not_doubtful": float(np.mean(np.abs(err[~doubtful]))) if (~doubtful).any() else None,
            "pareto_k_q": float(res.pareto_k_q),
            "approx_ok": int(np.sum(ok.values)) if ok is not None else None,
            "transforms_used": {str(k): int(v) for k, v in zip(*np.unique(res.transform.values, return_counts=True))}}


def _fit(method, model, draws, quick):
    t0 = time.perf_counter()
    log_q = None
    if method == "laplace":
        tree = pl.laplace(None, model, draws=draws, random_seed=0)  # raises where the posterior has no mode
        info = {k: tree["laplace"].attrs[k] for k in ("subspace", "rank", "curvature", "map_steps", "map_converged",
                                                      "relative_error", "dead_fraction", "jacobian_rank")}
    elif method == "qnvb":
        tree = pl.qnvb(None, model, draws=draws, random_seed=0, optimizer={"steps": 1000 if quick else 3000})
        info = {k: tree["qnvb"].attrs[k] for k in ("steps", "gradient_evaluations", "final_elbo")}
    else:
        tree, log_q, _ = _pathfinder(model, draws, 0)
        info = {}
    return tree, log_q, time.perf_counter() - t0, info


def run_problem(name, methods, draws, quick):
    prob = _problem(name)
    model = prob.jax_model
    truth, truth_se, mcmc = _truth(name)
    out = {"mcmc": {"error_of_sum": float(np.sum(mcmc["elpd_i"] - truth)),
                    "mean_abs_error": float(np.mean(np.abs(mcmc["elpd_i"] - truth))),
                    "doubtful": int(np.sum(mcmc["doubtful"])), "wall_s": mcmc["wall_s"]}}
    for method in methods:
        try:
            tree, log_q, fit_s, info = _fit(method, model, draws, quick)
        except ValueError as exc:  # e.g. the horseshoe has no mode: no Laplace approximation
            out[method] = {"error": str(exc)}
            print(f"  {name} {method}: {exc}", flush=True)
            continue
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = pl.loo(tree, model, log_q=log_q, progressbar=False)
        loo_s = time.perf_counter() - t0
        out[method] = {"fit_s": fit_s, "loo_s": loo_s, "wall_s": fit_s + loo_s, **info, **_score(res, truth, truth_se)}
        print(f"  {name} {method}: done in {fit_s + loo_s:.1f} s", flush=True)
    return out


def _table(results):
    cols = ("wall_s", "error_of_sum", "mean_abs_error", "max_abs_error", "doubtful", "silent_failures", "pareto_k_q",
            "approx_ok")
    lines = [f"{'problem':14s} {'method':11s} " + " ".join(f"{c:>15s}" for c in cols)]
    for name, rows in results.items():
        for method, r in rows.items():
            if "error" in r:
                lines.append(f"{name:14s} {method:11s} error: {r['error'][:100]}")
                continue
            vals = []
            for c in cols:
                v = r.get(c)
                vals.append(f"{v:15.3f}" if isinstance(v, float) else f"{'-' if v is None else v:>15}")
            lines.append(f"{name:14s} {method:11s} " + " ".join(vals))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 draws, shorter QNVB runs")
    ap.add_argument("--problems", default="ovarian_lr,ovarian_relu")
    ap.add_argument("--methods", default="laplace,qnvb,pathfinder")
    args = ap.parse_args(argv)
    draws = 500 if args.quick else 2000
    results = {}
    for name in args.problems.split(","):
        results[name] = run_problem(name, args.methods.split(","), draws, args.quick)
    print(_table(results))
    path = RESULTS / ("loo_approx_quick.json" if args.quick else "loo_approx.json")
    old = json.loads(path.read_text()) if path.exists() else {}
    if old.get("draws") == draws:  # a partial run (--problems / --methods) updates its own rows only
        for name, rows in results.items():
            old["results"].setdefault(name, {}).update(rows)
        results = old["results"]
    path.write_text(json.dumps({"draws": draws, "results": results, "cpu_count": __import__("os").cpu_count()},
                               indent=2, default=float))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
