"""Seconds per observation of ``pl.loo``'s adaptive search on small Stan programs.

    .venv/bin/python benchmarks/stan_search.py            # three programs, 2,000 draws
    .venv/bin/python benchmarks/stan_search.py --reduced  # the Poisson-lognormal one, 12 observations (CI)

Prints a table and writes ``benchmarks/results/stan_search.json`` (``--out`` elsewhere). Each model is a
regression with an offset and one extreme count (3 parameters, 40 observations, 2,000 draws),
sampled with Stan's NUTS through the bridge (``ppl-loo sample``'s sampler).
``pl.loo(data, model, second_opinions={"mixture": False, "smc": False})`` is timed warm (the search's JIT
compile done by a first call): with at most 100 observations those with plain k above 0.3 or a high influence are
examined (``adapt="auto"``), 121 candidates each (11 transformations x 11 steps), on the draws
of the fit. Seconds per observation are over all ``n`` observations of the data (``examined``: how many the
search examined, and the seconds per examined one). Programs: a negative-binomial and a Poisson regression
with 40 observations (3 and 2 parameters: the LOO density is the program on the data without the observation),
and ``stan_models/poisson_lognormal.stan`` with 20 (a latent effect per observation, N + 2 parameters: the LOO
density is ``log p(theta | y) - log_lik[i]``, the derived ``log_lik`` program of :mod:`ppl_loo.stan_bridge.derived`).
Rows are printed and the JSON written as each program finishes.

For each model the search runs twice (three times for the regressions: also with ``adapt="all"``, every
observation examined), with the full-model cache of the Stan callbacks
(``ppl_loo.adapters.stan.posterior.FULL_CACHE_ENTRIES``) and without it (0 entries: every callback
evaluates the full model itself); the two must give identical ``elpd_i``. Columns:
wall seconds, seconds per observation, draws evaluated by the bridge (full model, derived ``log_lik``
programs) and microseconds per evaluated draw.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

NB = """
data { int<lower=0> N; vector[N] x; vector[N] expo; array[N] int<lower=0> y; }
parameters { real alpha; real beta; real<lower=0> phi; }
model {
  alpha ~ normal(0, 5); beta ~ normal(0, 2); phi ~ gamma(2, 0.5);
  y ~ neg_binomial_2_log(alpha + beta * x + log(expo), phi);
}
generated quantities {
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = neg_binomial_2_log_lpmf(y[n] | alpha + beta * x[n] + log(expo[n]), phi);
}
"""

POISSON = """
data { int<lower=0> N; vector[N] x; vector[N] expo; array[N] int<lower=0> y; }
parameters { real alpha; real beta; }
model {
  alpha ~ normal(0, 5); beta ~ normal(0, 2);
  y ~ poisson_log(alpha + beta * x + log(expo));
}
generated quantities {
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = poisson_log_lpmf(y[n] | alpha + beta * x[n] + log(expo[n]));
}
"""


LATENT = (ROOT / "stan_models" / "poisson_lognormal.stan").read_text()


def data(seed=4, n=40):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    expo = rng.uniform(0.5, 2.0, size=n)
    y = rng.negative_binomial(5, 5 / (5 + expo * np.exp(1.0 + 0.5 * x)))
    y[7] = 80  # the extreme count
    return {"N": n, "x": x.tolist(), "expo": expo.tolist(), "y": [int(v) for v in y]}


def exact_poisson_loo(d, points=401, width=10.0):
    """Exact ``elpd_i`` of the Poisson program by quadrature: ``log p(y) - log p(y_-i)`` on a grid of mode +- ``width``
    Laplace sds per axis (the two parameters)."""
    from scipy.optimize import minimize
    from scipy.special import gammaln, logsumexp
    from scipy.stats import norm

    x, off, y = np.asarray(d["x"]), np.log(np.asarray(d["expo"])), np.asarray(d["y"])

    def log_joint(a, b):
        eta = a[..., None] + b[..., None] * x + off
        ll = y * eta - np.exp(eta) - gammaln(y + 1)
        return norm.logpdf(a, 0, 5) + norm.logpdf(b, 0, 2) + ll.sum(-1), ll

    fit = minimize(lambda t: -log_joint(np.asarray(t[0]), np.asarray(t[1]))[0], [1.0, 0.5])
    sd = np.sqrt(np.diag(fit.hess_inv))
    a, b = (np.linspace(m - width * s, m + width * s, points) for m, s in zip(fit.x, sd))
    total, ll = log_joint(*np.meshgrid(a, b, indexing="ij"))
    lz = logsumexp(total)
    return np.array([lz - logsumexp(total - ll[..., i]) for i in range(len(y))])


class Counter:
    """Draws and seconds of the bridge's batched log densities, by program (full model or derived)."""

    def __init__(self, sm_cls):
        self.rows = {}
        self.cls = sm_cls
        self.orig = {n: getattr(sm_cls, n) for n in ("log_density", "log_density_gradient")}

    def __enter__(self):
        for name, fn in self.orig.items():
            def wrapped(model, x, *a, _fn=fn, **k):
                t0 = time.perf_counter()
                out = _fn(model, x, *a, **k)
                row = self.rows.setdefault(id(model), [0, 0.0])
                row[0] += int(np.asarray(x).reshape(-1, model.dim).shape[0])
                row[1] += time.perf_counter() - t0
                return out
            setattr(self.cls, name, wrapped)
        return self

    def __exit__(self, *exc):
        for name, fn in self.orig.items():
            setattr(self.cls, name, fn)


def run_model(name, code, draws, cache_entries, n=40):
    import ppl_loo as pl
    import ppl_loo.adapters.stan.posterior as post
    from ppl_loo.stan_bridge.model import StanModel as Bridge
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    d = data(n=n)
    if code is LATENT:
        d = {"N": d["N"], "y": d["y"]}
    work = Path(tempfile.mkdtemp(prefix=f"stan_search_{name}_"))
    (work / f"{name}.stan").write_text(code)
    sm = pl.StanModel(str(work / f"{name}.stan"), d, sampler=True)
    csv = sample_cmdstan_csv(sm, str(work / "csv"), chains=4, random_seed=3, num_warmup=500, num_samples=draws // 4)
    tree = pl.from_cmdstan(sorted(str(p) for p in (work / "csv").glob("*.csv")), log_likelihood="log_lik")
    del csv
    out = {}
    kw = dict(second_opinions={"mixture": False, "smc": False}, progressbar=False)
    default_entries = post.FULL_CACHE_ENTRIES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.loo(tree, sm, **kw)  # the JIT compile of the search, outside the timings
        for label, entries, adapt in cache_entries:
            post.FULL_CACHE_ENTRIES = entries
            try:
                with Counter(Bridge) as c:
                    t0 = time.perf_counter()
                    res = pl.loo(tree, sm, **kw, search={"adapt": adapt})
                    wall = time.perf_counter() - t0
            finally:
                post.FULL_CACHE_ENTRIES = default_entries
            n_draws = sum(r[0] for r in c.rows.values())
            bridge_s = sum(r[1] for r in c.rows.values())
            n_searched = int(np.asarray(res.searched).sum())
            out[label] = {"wall_s": wall, "s_per_obs": wall / d["N"], "draws_evaluated": n_draws,
                          "n_searched": n_searched, "s_per_searched": wall / max(n_searched, 1),
                          "bridge_s": bridge_s, "us_per_draw": 1e6 * bridge_s / max(n_draws, 1),
                          "elpd": float(res.elpd), "elpd_i": [float(v) for v in np.asarray(res.elpd_i).ravel()],
                          "n_obs": d["N"], "n_draws": draws, "dim": sm.dim if hasattr(sm, "dim") else None}
    return out


def print_rows(name, r):
    for label, v in r.items():
        print(f"{name:<18}{label:<16}{v['n_obs']:>4}{v['n_searched']:>9}{v['wall_s']:>9.1f}{v['s_per_obs']:>8.2f}"
              f"{v['s_per_searched']:>11.2f}{v['draws_evaluated']:>17,}{v['us_per_draw']:>9.2f}{v['elpd']:>11.3f}",
              flush=True)
    same = r["with cache"]["elpd_i"] == r["without cache"]["elpd_i"]
    print(f"{name}: elpd_i identical with and without the cache: {same}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reduced", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "stan_search.json"))
    args = ap.parse_args(argv)
    # (program, observations): the latent-effect program has N + 2 parameters and 20 observations in the full
    # run (its search takes minutes per call on two cores)
    models = ({"poisson_lognormal": (LATENT, 12)} if args.reduced else
              {"neg_binomial": (NB, 40), "poisson": (POISSON, 40), "poisson_lognormal": (LATENT, 20)})
    draws = 1000 if args.reduced else 2000
    cases = (("without cache", 0, "auto"), ("with cache", 2, "auto"))
    every = ("adapt='all'", 2, "all")  # every observation examined (the regressions only)
    print(f"{'model':<18}{'case':<16}{'n':>4}{'examined':>9}{'wall s':>9}{'s/obs':>8}{'s/examined':>11}"
          f"{'draws evaluated':>17}{'us/draw':>9}{'elpd':>11}", flush=True)
    rows = {}
    for name, (code, n) in models.items():
        rows[name] = run_model(name, code, draws, cases if code is LATENT else (*cases, every), n)
        print_rows(name, rows[name])
        if code is POISSON:  # against the exact LOO (quadrature): examining fewer observations costs no accuracy
            exact = exact_poisson_loo(data(n=n))
            for label, v in rows[name].items():
                v["mean_abs_err_exact"] = float(np.mean(np.abs(np.asarray(v["elpd_i"]) - exact)))
                print(f"{name} {label}: mean |elpd_i - exact| {v['mean_abs_err_exact']:.4f}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"mode": "reduced" if args.reduced else "full", "models": rows},
                                             indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
