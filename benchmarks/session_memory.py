"""A user's session of ``pl.loo`` and the after-LOO functions: wall time per call, memory mappings and resident memory
per round.

Three models, each fitted once: a PyMC normal mean with one outlier (exact posterior draws), a PyMC logistic
regression (``pm.sample``), and a ``pl.JaxModel`` linear regression with known noise and a high-leverage outlier
(exact posterior draws). Each round runs, for every model, ``pl.loo`` (a new result) and then ``pl.loo_pit``,
``pl.loo_score`` (CRPS and SCRPS), ``pl.loo_r2``, ``pl.loo_metrics`` and ``pl.loo_expectations`` on that result, and
records each call's wall time, the number of the process' memory mappings (lines of ``/proc/self/maps``; the kernel
refuses new ones past ``vm.max_map_count``, 65,530 by default) and its resident memory (``VmRSS``) after the round.
Acceptance: mappings and RSS flat after the first round, nothing crashes.

On the logistic regression it also times each after-LOO call on a result for the first time (its points built) and
again (reused), beside one ``pm.sample`` of the model and ``arviz_stats``' plain PSIS equivalent of each call.

Prints a table and writes ``benchmarks/results/session_memory.json`` (``--reduced``: smaller models, fewer rounds,
``session_memory_reduced.json``).

    nice -n 10 .venv/bin/python benchmarks/session_memory.py [--reduced] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# benchmarks/pymc.py would shadow the pymc package: this folder off the path, the repository on it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))


def n_maps() -> int:
    """Lines of ``/proc/self/maps`` (-1 where there is none)."""
    try:
        with open("/proc/self/maps") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return -1


def rss_mb() -> float:
    """``VmRSS`` of this process in MiB (-1 where unavailable)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return -1.0


def timed(fn):
    """``(seconds, result or None, error message or None)`` of ``fn()``."""
    t = time.perf_counter()
    try:
        out, err = fn(), None
    except Exception as e:  # noqa: BLE001 - recorded: a refusal is a result of the session, not a crash
        out, err = None, f"{type(e).__name__}: {str(e)[:200]}"
    return time.perf_counter() - t, out, err


# ----------------------------------------------------------------------------- the three models
def normal_outlier(seed=0):
    """A conjugate normal mean in PyMC (sigma 1, prior N(0, 10^2)), 12 observations and one outlier, exact draws."""
    import pymc as pm
    import xarray as xr

    y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5, 10.0])
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=y)
    prec = 1 / 100 + y.size
    draws = y.sum() / prec + np.random.default_rng(seed).standard_normal((4, 1000)) / np.sqrt(prec)
    idata = xr.DataTree.from_dict({"posterior": xr.Dataset({"mu": (("chain", "draw"), draws)})})
    pm.compute_log_likelihood(idata, model=m, progressbar=False, extend_inferencedata=True)
    pm.sample_posterior_predictive(idata, model=m, random_seed=seed, progressbar=False, extend_inferencedata=True)
    return {"name": "pymc_normal_outlier", "model": m, "data": idata, "n": y.size, "kw": {}}


def logistic(n, p, seed=1):
    """A PyMC logistic regression of ``n`` observations and ``p`` features (the data made with numpy)."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = rng.normal(size=p) * 0.25  # no observation with all y_rep equal: the SCRPS defined everywhere
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ beta - 0.3)))).astype(int)
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=p)
        a = pm.Normal("a", 0.0, 2.0)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y)
    t = time.perf_counter()
    idata = pm.sample(random_seed=seed, progressbar=False, model=m)
    fit_s = time.perf_counter() - t
    pm.compute_log_likelihood(idata, model=m, progressbar=False, extend_inferencedata=True)
    pm.sample_posterior_predictive(idata, model=m, random_seed=seed, progressbar=False, extend_inferencedata=True)
    return {"name": "pymc_logistic", "model": m, "data": idata, "n": n, "p": p, "fit_s": fit_s, "kw": {}}


def jax_linear(n, p, seed=2, sigma=0.8, tau=2.0):
    """A ``pl.JaxModel`` linear regression with known noise, one high-leverage outlier, exact posterior draws; its
    pointwise functions (mean, simulator) given as a user would."""
    import jax.numpy as jnp
    import jax.scipy.stats as jst
    import xarray as xr

    import ppl_loo as pl
    from ppl_loo.model.protocol import Output

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X[0] *= 6.0
    y = X @ rng.normal(size=p) + sigma * rng.normal(size=n)
    y[0] += 8.0
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    model = pl.JaxModel({"beta": ((p,), None)}, lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0.0, tau)),
                        lambda v: jst.norm.logpdf(yj, Xj @ v["beta"], sigma), obs_dims=("obs",), observed=y,
                        output=Output(lambda v: Xj @ v["beta"], "gaussian", sigma))
    prec = X.T @ X / sigma**2 + np.eye(p) / tau**2
    cov = np.linalg.inv(prec)
    mean = cov @ X.T @ y / sigma**2
    beta = mean + rng.standard_normal((4000, p)) @ np.linalg.cholesky(cov).T
    mu = beta @ X.T
    ll = -0.5 * ((y - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
    y_rep = mu + sigma * rng.standard_normal(mu.shape)
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"beta": (("chain", "draw", "coef"), beta.reshape(4, 1000, p))}),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll.reshape(4, 1000, n))}),
        "posterior_predictive": xr.Dataset({"y": (("chain", "draw", "obs"), y_rep.reshape(4, 1000, n))}),
        "observed_data": xr.Dataset({"y": (("obs",), y)}),
    })

    def mean_fn(params):
        return np.asarray(params["beta"]) @ X.T

    def simulate(params, rng):
        m = np.asarray(params["beta"]) @ X.T
        return m + sigma * rng.standard_normal(m.shape)

    return {"name": "jax_linear", "model": model, "data": tree, "n": n, "p": p,
            "kw": {"mean": mean_fn, "simulate": simulate}}


# ----------------------------------------------------------------------------- the calls
def after_loo_calls(pl, spec, res):
    """``name -> call`` of the after-LOO functions on ``res``."""
    data, model, kw = spec["data"], spec["model"], spec["kw"]
    mean = kw.get("mean")
    sim = kw.get("simulate")
    values = mean if mean is not None else _own_mean(model)
    return {
        "loo_pit": lambda: pl.loo_pit(data, res, model=model, random_seed=0),
        "loo_score_crps": lambda: pl.loo_score(data, res, model=model, kind="crps", random_seed=0, simulate=sim),
        "loo_score_scrps": lambda: pl.loo_score(data, res, model=model, kind="scrps", random_seed=0, simulate=sim),
        "loo_r2": lambda: pl.loo_r2(data, res, model=model, mean=mean),
        "loo_metrics": lambda: pl.loo_metrics(data, res, model=model, kind="rmse", mean=mean),
        "loo_expectation": lambda: pl.loo_expectations(data, res, values, model=model),
    }


def _own_mean(model):
    """The predictive mean of a PyMC model as a callable (the model's own, ``Model.predictive_mean``)."""
    from ppl_loo.adapters.as_model import as_model

    return as_model(model).predictive_mean


def arviz_calls(spec):
    """``name -> call`` of ``arviz_stats``' plain PSIS equivalents."""
    import arviz_stats as azs

    data = spec["data"]
    return {
        "loo_pit": lambda: azs.loo_pit(data, random_state=0),
        "loo_score_crps": lambda: azs.loo_score(data, kind="crps"),
        "loo_score_scrps": lambda: azs.loo_score(data, kind="scrps"),
        "loo_r2": lambda: azs.loo_r2(data, "y"),
        "loo_metrics": lambda: azs.loo_metrics(data, kind="rmse"),
        "loo_expectation": lambda: azs.loo_expectations(data, kind="mean"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reduced", action="store_true", help="smaller models, 3 rounds")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 10; 3 with --reduced)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import ppl_loo as pl

    rounds = args.rounds or (3 if args.reduced else 10)
    n_lr, p_lr = (100, 5) if args.reduced else (300, 20)
    n_lin, p_lin = (40, 3) if args.reduced else (200, 5)
    out_path = Path(args.out) if args.out else HERE / "results" / (
        "session_memory_reduced.json" if args.reduced else "session_memory.json")

    specs = [normal_outlier(), logistic(n_lr, p_lr), jax_linear(n_lin, p_lin)]
    print(f"fitted; logistic regression ({n_lr} x {p_lr}) pm.sample {specs[1]['fit_s']:.1f} s", flush=True)

    rows = []
    names = None
    for r in range(rounds):
        row = {"round": r, "calls": {}}
        for spec in specs:
            m0 = n_maps()
            dt, res, err = timed(lambda: pl.loo(spec["data"], spec["model"], progressbar=False, random_seed=1))
            calls = {"loo": {"s": dt, "error": err, "maps_delta": n_maps() - m0}}
            if res is not None:
                for name, call in after_loo_calls(pl, spec, res).items():
                    m0 = n_maps()
                    t, _, e = timed(call)
                    calls[name] = {"s": t, "error": e, "maps_delta": n_maps() - m0}
            row["calls"][spec["name"]] = calls
            names = list(calls)
        row["maps"], row["rss_mb"] = n_maps(), rss_mb()
        rows.append(row)
        times = "  ".join(f"{spec['name']}: " + " ".join(f"{c['s']:.2f}" for c in row["calls"][spec["name"]].values())
                          for spec in specs)
        d_loo = sum(c["loo"]["maps_delta"] for c in row["calls"].values())
        d_after = sum(v["maps_delta"] for c in row["calls"].values() for k, v in c.items() if k != "loo")
        print(f"round {r:2d}  maps {row['maps']:6d} (pl.loo {d_loo:+5d}, after-LOO {d_after:+5d})  rss "
              f"{row['rss_mb']:8.1f} MiB  |  {times}", flush=True)
    print("columns per model:", ", ".join(names))

    # the logistic regression: first call on a new result, second call, arviz_stats' plain PSIS, one pm.sample
    spec = specs[1]
    res = pl.loo(spec["data"], spec["model"], progressbar=False, random_seed=2)
    compare = {}
    for name, call in after_loo_calls(pl, spec, res).items():
        first, _, err = timed(call)
        second, _, _ = timed(call)
        ref, _, ref_err = timed(arviz_calls(spec)[name])
        compare[name] = {"first_s": first, "second_s": second, "arviz_stats_s": ref, "error": err,
                         "arviz_stats_error": ref_err, "first_over_fit": first / spec["fit_s"]}
    print(f"\nlogistic regression {n_lr} x {p_lr}: one pm.sample {spec['fit_s']:.2f} s")
    print(f"{'call':18s} {'first':>8s} {'again':>8s} {'arviz':>8s} {'first/fit':>10s}")
    for name, c in compare.items():
        print(f"{name:18s} {c['first_s']:8.2f} {c['second_s']:8.2f} {c['arviz_stats_s']:8.2f} "
              f"{c['first_over_fit']:10.3f}  {c['error'] or ''}")

    maps = [row["maps"] for row in rows]
    rss = [row["rss_mb"] for row in rows]
    later = rows[1:]
    loo_maps = sum(c["maps_delta"] for row in later for calls in row["calls"].values() for k, c in calls.items()
                   if k == "loo")
    after_maps = sum(c["maps_delta"] for row in later for calls in row["calls"].values() for k, c in calls.items()
                     if k != "loo")
    summary = {"maps_first_round": maps[0], "maps_added_by_pl_loo_after_first_round": loo_maps,
               "maps_added_by_after_loo_calls_after_first_round": after_maps, "maps_last_round": maps[-1],
               "maps_growth_after_first_round": maps[-1] - maps[0], "maps_max_after_first": max(maps[1:] or maps),
               "rss_mb_first_round": rss[0], "rss_mb_last_round": rss[-1],
               "rss_mb_growth_after_first_round": rss[-1] - rss[0],
               "errors": sorted({f"{m}.{k}: {c['error']}" for row in rows for m, calls in row["calls"].items()
                                 for k, c in calls.items() if c["error"]})}
    print("\n" + json.dumps(summary, indent=1))
    result = {"what": "a session of pl.loo and the after-LOO functions over three models (module docstring)",
              "reduced": args.reduced, "rounds": rounds,
              "logistic": {"n": n_lr, "p": p_lr, "pm_sample_s": specs[1]["fit_s"]},
              "jax_linear": {"n": n_lin, "p": p_lin}, "cpu_count": os.cpu_count(),
              "load_average_1min_at_end": os.getloadavg()[0], "summary": summary, "rows": rows,
              "logistic_after_loo_vs_fit_and_arviz": compare}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
