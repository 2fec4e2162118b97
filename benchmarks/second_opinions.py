"""Cost and accuracy of ``pl.loo``'s second opinions (mixture importance sampling, tempered SMC).

For each model: the wall time of one NUTS fit of the model (the user's fit), of the search alone
(``pl.loo(..., second_opinions={"mixture": False, "smc": False})``), of ``pl.loo`` with its defaults
(``mixture="auto"``, ``smc="auto"``) and, within it, of the mixture run and of SMC; the ratio of the defaults' wall to
``fit + search`` (the target: at most 2.5 x the fit plus the search); how many observations are
doubtful before and after, the evidence counts, and, where the model has one, the largest |error| against
the exact LOO. The ovarian rows are scored against the truth suite's refit truth
(``benchmarks/results/truth/ovarian_lr.json``: bridge sampling over one refit per observation): how many
observations are vouched for and within 3 combined Monte Carlo SEs of it, and how many are silent failures
(vouched for, yet beyond 3 combined SEs).

    .venv/bin/python benchmarks/second_opinions.py            # every model (minutes)
    .venv/bin/python benchmarks/second_opinions.py --reduced  # CI (tests/test_second_opinions_benchmark.py): the
                                                              # leverage regression only, 4 x 500 draws

Writes ``benchmarks/results/second_opinions.json`` (``--out`` elsewhere) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# benchmarks/pymc.py (the PyMC benchmark) would shadow the pymc package: this script imports from the repository root
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))


def fit_leverage(chains, draws, seed=1):
    """NUTS on the JAX leverage model (NumPyro): ``(name, model, data, fit seconds, exact)``."""
    from ppl_loo.sampling import sample_nuts
    from tests.gaussian_models import leverage_problem
    from tests.linear_models import jax_model

    m = leverage_problem()
    model = jax_model(m)
    t0 = time.perf_counter()
    data = sample_nuts(model, num_chains=chains, num_warmup=draws, num_samples=draws, random_seed=seed)
    return "leverage regression (JAX, n=40, d=15)", model, data, time.perf_counter() - t0, m.exact_elpd_i()


def fit_leverage_pymc(chains, draws, seed=1):
    import pymc as pm

    from tests.gaussian_models import leverage_problem
    from tests.linear_models import pymc_model

    m = leverage_problem()
    model = pymc_model(m)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = pm.sample(draws=draws, tune=draws, chains=chains, cores=1, random_seed=seed, progressbar=False,
                         idata_kwargs={"log_likelihood": True})
    return "leverage regression (PyMC, n=40, d=15)", model, data, time.perf_counter() - t0, m.exact_elpd_i()


def fit_ovarian(chains, draws, seed=2024):
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.models import LogisticRegression
    from ppl_loo.sampling import sample_nuts

    X, y = load_ovarian()
    model = LogisticRegression(X, y, prior="horseshoe")
    t0 = time.perf_counter()
    data = sample_nuts(model, num_chains=chains, num_warmup=draws, num_samples=draws, random_seed=seed,
                       numpyro_model=model.numpyro_model())
    return (f"ovarian horseshoe LR (n=54, d=3075; the demo's model), {chains} x {draws}", model, data,
            time.perf_counter() - t0, refit_truth("ovarian_lr"))


def refit_truth(name):
    """``(value, mcse)`` per observation of the truth suite's committed truth of ``name``."""
    rep = json.loads((HERE / "results" / "truth" / f"{name}.json").read_text())
    obs = sorted(rep["truth"], key=int)
    value = np.array([rep["truth"][i].get("exact", rep["truth"][i]["bridge"]) for i in obs], float)
    mcse = np.array([0.0 if "exact" in rep["truth"][i] else rep["truth"][i]["bridge_mcse"] for i in obs], float)
    return value, mcse


def measure(name, model, data, t_fit, exact, seed):
    import ppl_loo as pl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        before = pl.loo(data, model, progressbar=False, second_opinions={"mixture": False, "smc": False})
        t_search = time.perf_counter() - t0
        t0 = time.perf_counter()
        after = pl.loo(data, model, progressbar=False, random_seed=seed)
        t_all = time.perf_counter() - t0
    ev = np.asarray(after.evidence.values).astype(str).ravel()
    kinds, counts = np.unique(ev, return_counts=True)
    row = {"model": name, "draws": int(after.n_samples), "fit_s": t_fit, "search_s": t_search, "loo_default_s": t_all,
           "mixture_s": (after.mixture_info or {}).get("seconds", 0.0),
           "smc_s": (after.smc_info or {}).get("seconds", 0.0),
           "ratio_to_fit_plus_search": t_all / (t_fit + t_search),
           # what the second opinions add, in fits of the model (the search's JIT compile, paid by the first call,
           # makes t_all and t_search hard to compare; the runs are timed inside the call)
           "opinions_to_fit": ((after.mixture_info or {}).get("seconds", 0.0)
                               + (after.smc_info or {}).get("seconds", 0.0)) / t_fit,
           "doubtful_before": int(before.doubtful.values.sum()), "doubtful_after": int(after.doubtful.values.sum()),
           "n": int(after.n_data_points), "evidence": {str(k) or "doubtful": int(c) for k, c in zip(kinds, counts)},
           "max_rhat_main": float(after.max_rhat), "elpd": float(after.elpd),
           "max_rhat_mixture": float((after.mixture_info or {}).get("max_rhat", float("nan")))}
    if isinstance(exact, tuple):  # a refit truth with its Monte Carlo SE
        value, tse = exact
        err = after.elpd_i.values.ravel() - value
        within = np.abs(err) <= 3 * np.hypot(after.mcse_elpd_i.values.ravel(), tse)
        vouched = ev != ""
        row.update({"vouched": int(vouched.sum()), "vouched_and_within_3se": int((vouched & within).sum()),
                    "silent_failures": int((vouched & ~within).sum()),
                    "mean_abs_error_after": float(np.mean(np.abs(err))),
                    "max_abs_error_after": float(np.max(np.abs(err))),
                    "mean_abs_error_plain": float(np.mean(np.abs(pl.loo(data).elpd_i.values.ravel() - value)))})
    elif exact is not None:
        row["max_abs_error_before"] = float(np.max(np.abs(before.elpd_i.values.ravel() - exact)))
        row["max_abs_error_after"] = float(np.max(np.abs(after.elpd_i.values.ravel() - exact)))
        row["max_abs_error_plain"] = float(np.max(np.abs(pl.loo(data).elpd_i.values.ravel() - exact)))
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reduced", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "second_opinions.json"))
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    fits = [(fit_leverage, 4, 500 if args.reduced else 1000)]
    if not args.reduced:
        fits += [(fit_leverage_pymc, 4, 1000), (fit_ovarian, 2, 500), (fit_ovarian, 4, 1000)]
    rows = [measure(*fit(chains, draws), seed=7) for fit, chains, draws in fits]
    cols = ("model", "draws", "fit_s", "search_s", "mixture_s", "smc_s", "loo_default_s", "ratio_to_fit_plus_search",
            "opinions_to_fit", "max_rhat_main", "max_rhat_mixture",
            "doubtful_before", "doubtful_after", "max_abs_error_after", "vouched_and_within_3se", "silent_failures")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r.get(c, float('nan')):.2f}" if isinstance(r.get(c), float) else str(r.get(c, "-"))
                         for c in cols), "|", r["evidence"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "reduced": bool(args.reduced)}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
