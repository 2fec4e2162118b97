"""Batched refits (``pl.loo(..., refit=...)``, all refits in one batched NUTS program) against one fit of the model
and against the refit truth.

Full mode: the ovarian horseshoe logistic regression (the demo's model, n = 54, d = 3,075). One NUTS fit of the model
(4 chains x (1000 + 1000), the truth suite's main-fit settings) is timed; then the batched refits of the first
``--obs`` observations (default 8; ``--obs 54`` for all) with the refit defaults (warm-started: 150 iterations of
step-size adaptation; ``--warmup N`` overrides, ``--adapt window`` for the windowed adaptation) and the truth suite's
500 draws per chain, each scored against the truth suite's committed truth
(``benchmarks/results/truth/ovarian_lr.json``: bridge sampling over sequential NumPyro refits):
``z = (elpd_i - truth) / sqrt(mcse^2 + truth_mcse^2)``.

``--stan``: two Stan programs of the truth suite, 8 refits each beside one Stan fit (4 x (1000 + 1000)):
``poisson_re_stan`` (a latent per observation, so the refits sample the LOO density in the full space: Stan's own
NUTS on the derived program of ``logp - log_lik[i]`` by default) and ``leverage_wide_stan`` (Stan's own NUTS on the
data without the observation by default), each against batched NUTS on the bridge's callbacks, scored against the
committed truth and the closed form.

``--pymc``: a PyMC linear regression with 12 parameters (n = 100, 10 predictors, intercept, sigma): one
``pm.sample`` (4 chains x (1000 + 1000), its defaults, compilation included) timed, then 8 batched refits of it
(the refit defaults), and the same 8 refits by ``pm.sample`` one after the other (``batched=False``) to compare
with: ``z = (batched - sequential) / combined MCSE``.

Reduced mode (CI, ``tests/test_batched_refits_benchmark.py``): the leverage regression of ``tests/test_refit.py``
(p = 15, exact LOO in closed form), 8 refits batched and one after the other.

    .venv/bin/python benchmarks/batched_refits.py              # ovarian, 8 refits (2 to 3 minutes)
    .venv/bin/python benchmarks/batched_refits.py --obs 54 --out benchmarks/results/batched_refits_all.json
    .venv/bin/python benchmarks/batched_refits.py --obs 2 --sequential   # and the same refits one after the other
    .venv/bin/python benchmarks/batched_refits.py --pymc --out benchmarks/results/batched_refits_pymc.json
    .venv/bin/python benchmarks/batched_refits.py --stan --out benchmarks/results/batched_refits_stan.json
    .venv/bin/python benchmarks/batched_refits.py --reduced

Writes ``benchmarks/results/batched_refits.json`` (``--out`` elsewhere) and prints a table.
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
# benchmarks/pymc.py would shadow the pymc package: import from the repository root
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))


def _loo_refits(data, model, targets, kw, seed):
    import ppl_loo as pl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = pl.loo(data, model, progressbar=False, refit=targets, random_seed=seed,
                     search={"adapt": "flagged", "transforms": ["pmm1"]},
                     second_opinions={"refit_options": kw, "mixture": False, "smc": False})
        return res, time.perf_counter() - t0


def _refit_seconds(res, targets):
    """Wall time of the refits alone: each record's seconds (a batch's wall shared among its targets)."""
    return float(sum(res.refit_info[i]["seconds"] for i in targets))


def ovarian_fit(seed=1, warmup=1000, draws=1000, chain_method="sequential"):
    """The ovarian horseshoe LR and one NUTS fit of it (4 chains, the truth suite's target acceptance 0.95):
    ``(model, data, seconds)``; ``benchmarks/gpu.py`` fits it shorter, its chains vectorized."""
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.models import LogisticRegression
    from ppl_loo.sampling import sample_nuts

    X, y = load_ovarian()
    model = LogisticRegression(X, y, prior="horseshoe")
    t0 = time.perf_counter()
    data = sample_nuts(model, num_chains=4, num_warmup=warmup, num_samples=draws, random_seed=seed,
                       numpyro_model=model.numpyro_model(), target_accept=0.95, chain_method=chain_method)
    return model, data, time.perf_counter() - t0


def ovarian(n_obs, warmup, draws, seed=1, sequential=False, adapt="warm"):
    model, data, fit_s = ovarian_fit(seed)
    return {"model": "ovarian horseshoe LR (n=54, d=3075)", "fit": "4 x (1000 + 1000)", "fit_s": fit_s,
            **ovarian_refits(model, data, n_obs, warmup, draws, sequential=sequential, fit_s=fit_s, adapt=adapt)}


def _refit_options(warmup, draws, adapt, **more):
    """``refit_options``: the warmup only where given (otherwise the refit default of the adaptation)."""
    return {**({} if warmup is None else {"warmup": warmup}), "draws": draws, "adapt": adapt, **more}


def ovarian_refits(model, data, n_obs, warmup, draws, sequential=False, fit_s=None, adapt="warm"):
    """The batched refits of the first ``n_obs`` observations, each scored against the committed truth."""
    rep = json.loads((HERE / "results" / "truth" / "ovarian_lr.json").read_text())
    targets = list(range(n_obs))
    res, loo_s = _loo_refits(data, model, targets, _refit_options(warmup, draws, adapt, target_accept=0.95), 20261126)
    rows = []
    for i in targets:
        t = rep["truth"][str(i)]
        e, s = float(res.elpd_i.values[i]), float(res.mcse_elpd_i.values[i])
        info = res.refit_info[i]
        rows.append({"obs": i, "elpd_i": e, "mcse": s, "truth": t["bridge"], "truth_mcse": t["bridge_mcse"],
                     "z": (e - t["bridge"]) / float(np.hypot(s, t["bridge_mcse"])), "rhat_loglik": info["rhat_loglik"],
                     "rhat_max": info["rhat_max"], "divergences": info["divergences"]})
    refit_s = _refit_seconds(res, targets)
    seq = {}
    if sequential:  # the same refits one after the other with NumPyro's NUTS (the sequential path)
        res_seq, _ = _loo_refits(data, model, targets, {"warmup": warmup or 500, "draws": draws, "target_accept": 0.95,
                                                        "batched": False}, 20261126)
        zs = [(float(res_seq.elpd_i.values[i]) - rep["truth"][str(i)]["bridge"])
              / float(np.hypot(res_seq.mcse_elpd_i.values[i], rep["truth"][str(i)]["bridge_mcse"])) for i in targets]
        seq = {"sequential_refits_s": _refit_seconds(res_seq, targets),
               "sequential_max_abs_z": float(np.max(np.abs(zs))),
               "sequential_sampler": res_seq.refit_info[targets[0]]["sampler"]}
    return {**seq, "refits": n_obs, "refit_settings": _settings_text(res, targets[0]), "refits_s": refit_s,
            "loo_with_refits_s": loo_s, "refits_to_fit": refit_s / fit_s if fit_s else None,
            "within_3se": int(sum(abs(r["z"]) <= 3 for r in rows)), "max_abs_z": float(max(abs(r["z"]) for r in rows)),
            "max_rhat_loglik": float(max(r["rhat_loglik"] for r in rows)),
            "max_rhat_params": float(max(r["rhat_max"] for r in rows)),
            "sampler": res.refit_info[targets[0]]["sampler"], "per_observation": rows}


def _settings_text(res, i):
    """The refit settings as run: ``"4 x (150 + 500), warm"``."""
    info = res.refit_info[i]
    return f"{info['chains']} x ({info['warmup']} + {info['draws']}), {info['adapt']}"


def pymc_regression(seed=5):
    """A PyMC linear regression with 12 parameters: one ``pm.sample`` and 8 batched refits, each beside the same
    refit by ``pm.sample`` one after the other."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(100, 10))
    y = 0.5 + X @ rng.normal(scale=0.5, size=10) + rng.normal(scale=1.0, size=100)
    y[3] += 6.0  # one outlier among the refit targets
    with pm.Model() as m:
        b0 = pm.Normal("b0", 0.0, 5.0)
        b = pm.Normal("b", 0.0, 2.0, shape=10)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", b0 + pm.math.dot(X, b), sigma, observed=y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            idata = pm.sample(draws=1000, tune=1000, chains=4, random_seed=seed, progressbar=False)
            fit_s = time.perf_counter() - t0
    targets = list(range(8))
    res, loo_s = _loo_refits(idata, m, targets, {}, 11)
    seq, _ = _loo_refits(idata, m, targets, {"batched": False}, 11)
    z = [(float(res.elpd_i.values[i]) - float(seq.elpd_i.values[i]))
         / float(np.hypot(res.mcse_elpd_i.values[i], seq.mcse_elpd_i.values[i])) for i in targets]
    refit_s = _refit_seconds(res, targets)
    return {"model": "PyMC linear regression (n=100, 12 parameters)", "fit": "pm.sample 4 x (1000 + 1000)",
            "fit_s": fit_s, "refits": len(targets), "refit_settings": _settings_text(res, 0), "refits_s": refit_s,
            "loo_with_refits_s": loo_s, "refits_to_fit": refit_s / fit_s,
            "sequential_refits_s": _refit_seconds(seq, targets),
            "max_abs_z_vs_sequential": float(np.max(np.abs(z))),
            "max_rhat_params": float(max(res.refit_info[i]["rhat_max"] for i in targets)),
            "sampler": res.refit_info[0]["sampler"], "sequential_sampler": seq.refit_info[0]["sampler"]}


def _stan_row(prob, truth, *, forced_batched=False):
    """8 refits of a truth-suite Stan problem: one Stan fit (4 x (1000 + 1000), target acceptance 0.95) timed, the
    refits by the default path and by the other one (``batched=False`` where the default is batched; where the
    default is Stan's own NUTS, batched NUTS on the bridge's callbacks, through the adapter hook), each scored
    against ``truth`` (elpd_i and its MCSE per observation)."""
    from ppl_loo.adapters.stan.posterior import compile_sampling_program
    from ppl_loo.numerics.nuts import BatchedTarget

    settings = {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95}
    prob.fit(settings, 1)  # compiles the program (cached) outside the timing
    compile_sampling_program(prob.model())  # and the derived program of the mixture run and refits (ppl-loo sample)
    t0 = time.perf_counter()
    data = prob.fit(settings, 2)
    fit_s = time.perf_counter() - t0
    targets = list(range(8))
    out = {"model": prob.title, "fit": "Stan NUTS 4 x (1000 + 1000)", "fit_s": fit_s, "refits": len(targets)}
    for label in ("default", "other"):
        model = prob.model()
        kw = {}
        if label == "other" and forced_batched:  # on the adapter pl.loo runs on (cached on the StanModel)
            from ppl_loo.adapters.stan.posterior import loo_adapter

            adapter = loo_adapter(model, data=data)
            adapter.batched_refit_density = lambda m=adapter: BatchedTarget(m.loo_logp, vectorize=True)
        elif label == "other":
            kw = {"batched": False}
        res, _ = _loo_refits(data, model, targets, kw, 5)
        z = [(float(res.elpd_i.values[i]) - truth[i][0]) / float(np.hypot(res.mcse_elpd_i.values[i], truth[i][1]))
             for i in targets]
        out[label] = {"sampler": res.refit_info[0]["sampler"], "refit_settings": _settings_text(res, 0),
                      "refits_s": _refit_seconds(res, targets), "refits_to_fit": _refit_seconds(res, targets) / fit_s,
                      "max_abs_z": float(np.max(np.abs(z))), "z": [float(v) for v in z]}
    return out


def stan_rows():
    """Stan: ``poisson_re_stan`` (a latent per observation: Stan's NUTS on the derived program of ``logp -
    log_lik[i]`` by default) against its committed truth, and ``leverage_wide_stan`` (Stan's own NUTS on the data
    without the observation by default) against its closed form; each beside batched NUTS on the bridge's
    callbacks."""
    sys.path.insert(0, str(HERE / "truth"))
    from problems import LeverageWideStan, PoissonREStan

    rep = json.loads((HERE / "results" / "truth" / "poisson_re_stan.json").read_text())
    pois = PoissonREStan()
    truth = {i: (rep["truth"][str(i)]["bridge"], rep["truth"][str(i)]["bridge_mcse"]) for i in range(8)}
    lev = LeverageWideStan()
    exact = lev.exact()
    return {"poisson_re_stan": _stan_row(pois, truth, forced_batched=True),
            "leverage_wide_stan": _stan_row(lev, {i: (float(exact[i]), 0.0) for i in range(8)}, forced_batched=True)}


def leverage(seed=3):
    from tests.gaussian_models import leverage_problem

    m = leverage_problem()
    data = m.exact_draws(n_chains=4, n_draws=500, seed=seed)
    targets = list(range(8))
    kw = {"warmup": 300, "draws": 500}
    res, loo_b = _loo_refits(data, m, targets, kw, 11)
    seq, loo_s = _loo_refits(data, m, targets, {**kw, "batched": False}, 11)
    exact = m.exact_elpd_i()
    z = [(float(res.elpd_i.values[i]) - exact[i]) / float(res.mcse_elpd_i.values[i]) for i in targets]
    z_seq = [(float(seq.elpd_i.values[i]) - exact[i]) / float(seq.mcse_elpd_i.values[i]) for i in targets]
    return {"model": "leverage regression (JAX, n=40, d=15; exact LOO)", "refits": len(targets),
            "refit_settings": "4 x (300 + 500)", "batched_refits_s": _refit_seconds(res, targets),
            "sequential_refits_s": _refit_seconds(seq, targets), "max_abs_z_batched": float(np.max(np.abs(z))),
            "max_abs_z_sequential": float(np.max(np.abs(z_seq))), "sampler": res.refit_info[0]["sampler"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reduced", action="store_true")
    ap.add_argument("--obs", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=None, help="refit warmup (default: the refit default)")
    ap.add_argument("--adapt", default="warm", choices=["warm", "window"])
    ap.add_argument("--pymc", action="store_true", help="the 12-parameter PyMC regression instead")
    ap.add_argument("--stan", action="store_true", help="two Stan programs of the truth suite instead")
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--sequential", action="store_true", help="also the same refits one after the other (NumPyro)")
    ap.add_argument("--out", default=str(HERE / "results" / "batched_refits.json"))
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    if args.reduced:
        row = leverage()
    elif args.pymc:
        row = pymc_regression()
    elif args.stan:
        row = stan_rows()
    else:
        row = ovarian(args.obs, args.warmup, args.draws, sequential=args.sequential, adapt=args.adapt)
    for key, value in row.items():
        if key != "per_observation":
            print(f"{key:>22}: {value:.3f}" if isinstance(value, float) else f"{key:>22}: {value}")
    for r in row.get("per_observation", []):
        print(f"  obs {r['obs']:2d}: {r['elpd_i']:8.3f} ± {r['mcse']:.3f}  truth {r['truth']:8.3f} ± "
              f"{r['truth_mcse']:.3f}"
              f"  z {r['z']:+.2f}  R-hat {r['rhat_loglik']:.3f} / {r['rhat_max']:.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"row": row, "reduced": bool(args.reduced), "device": jax.default_backend(), "cpu_count": os.cpu_count(),
           "load_average_1min": os.getloadavg()[0]}
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
