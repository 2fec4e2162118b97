"""``pl.loo`` with its defaults on a PyMC model without structure, checked against refits.

The model is :mod:`memory_generic`'s regularized-horseshoe logistic regression written in PyMC (``n = 126``,
``p = 312``, ``d = 627`` free parameters, ``beta`` a deterministic, so no GLM structure is found); its draws are
nutpie's 4 x 1000 (cached under ``benchmarks/.cache/`` by :mod:`memory_generic`). ``pl.loo(idata, model)`` runs
with its defaults (the search, the mixture run where something is doubtful, SMC skipped above 100 parameters);
then the observations with plain-PSIS k-hat above 0.5 (all of them, or a random sample of ``--refits K``) are
refit without the observation (``ppl_loo``'s batched refits, 4 x (500 + 500), bridge sampling against the main
fit) and each reported ``elpd_i`` is compared with its refit: within 3 combined Monte Carlo SEs or not, and
whether ``pl.loo`` vouched for it (a vouched estimate beyond 3 SEs is a silent failure).

    .venv/bin/python benchmarks/horseshoe_pymc_refits.py              # every observation with k-hat above 0.5
    .venv/bin/python benchmarks/horseshoe_pymc_refits.py --refits 8   # a random sample of 8 of them

Writes ``benchmarks/results/horseshoe_pymc_refits.json`` (``--out``, with the wall times of this run) and prints the
summary; it takes tens of minutes (``pl.loo``, then one refit per observation), so CI does not run it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# this folder holds benchmarks/pymc.py: keep it off the import path, so that ``import pymc`` is PyMC
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def _memory_generic():
    spec = importlib.util.spec_from_file_location("memory_generic", HERE / "memory_generic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refits", type=int, default=None, help="refit a random sample of this many (default: all)")
    ap.add_argument("--out", default=str(HERE / "results" / "horseshoe_pymc_refits.json"))
    args = ap.parse_args(argv)
    import xarray as xr

    import ppl_loo as pl
    from ppl_loo.adapters.as_model import as_model
    from ppl_loo.workflow.exact.refit import refit_settings, run_refits
    from ppl_loo.workflow.loo.draws import loo_draws

    mg, p = _memory_generic(), 312
    t0 = time.perf_counter()
    path = mg.draws_file(p, 4, 1000, 1000)
    t_fit = time.perf_counter() - t0
    idata, model = xr.open_datatree(path), mg.horseshoe_model(p)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(idata, model, progressbar=False)
    t_loo = time.perf_counter() - t0
    for line in res.trust_lines():
        print(line, flush=True)
    k = res.pareto_k_psis.values
    doubtful, evidence = res.doubtful.values.astype(bool), res.evidence.values.astype(str)
    hard = np.flatnonzero(k > 0.5)
    targets = hard if args.refits is None else np.random.default_rng(0).choice(hard, min(args.refits, hard.size),
                                                                                replace=False)
    targets = sorted(int(i) for i in targets)
    adapter = as_model(model, data=idata)
    draws = loo_draws(idata, adapter, "y", None)
    t0 = time.perf_counter()
    settings = refit_settings(idata, {"warmup": 500, "draws": 500})
    records, _ = run_refits(adapter, draws.theta, draws.ll, targets, settings, random_seed=1, progressbar=False)
    t_refit = time.perf_counter() - t0
    rows = []
    for i in targets:
        r, e, s = records[i], float(res.elpd_i.values[i]), float(res.mcse_elpd_i.values[i])
        z = (e - r["elpd_i"]) / np.hypot(s, r["mcse"])
        rows.append({"obs": i, "k_plain": float(k[i]), "evidence": str(evidence[i]), "doubtful": bool(doubtful[i]),
                     "elpd_i": e, "mcse": s, "refit": float(r["elpd_i"]), "refit_mcse": float(r["mcse"]), "z": float(z),
                     "refit_rhat_loglik": float(r["rhat_loglik"]), "refit_rhat_max": float(r["rhat_max"])})
    z = np.array([r["z"] for r in rows])
    vouched = np.array([not r["doubtful"] for r in rows])
    conv = np.array([r["refit_rhat_loglik"] <= 1.01 for r in rows])
    summary = {
        "model": f"regularized-horseshoe logistic regression (PyMC), n = {k.size}, p = {p}, d = {2 * p + 3}",
        "fit_s": t_fit, "loo_s": t_loo, "refit_s": t_refit, "n_refits": len(rows), "max_rhat_main": float(res.max_rhat),
        "mixture_max_rhat": (res.mixture_info or {}).get("max_rhat"), "n": int(k.size), "n_k_above_05": int(hard.size),
        "vouched_k_above_05": int((~doubtful[hard]).sum()), "doubtful": int(doubtful.sum()),
        "evidence": {e or "doubtful": int((evidence == e).sum()) for e in np.unique(evidence)},
        "refit_vouched_within_3se": int(np.sum(vouched & (np.abs(z) <= 3))),
        "silent_failures": int(np.sum(vouched & (np.abs(z) > 3))), "max_abs_z": float(np.max(np.abs(z))),
        "refits_loglik_rhat_above_101": int(np.sum(~conv)),
        "mean_abs_error_vs_refit": float(np.mean([abs(r["elpd_i"] - r["refit"]) for r in rows])),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, "per_observation": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(json.dumps({key: v for key, v in summary.items() if key != "per_observation"}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
