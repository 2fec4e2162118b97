"""QNVB (Duersch's quasi-Newton VB, ``ppl_loo.numerics.qnvb``) against ADVI and Pathfinder.

    .venv/bin/python benchmarks/qnvb.py [--quick]

Prints a table and writes ``benchmarks/results/qnvb.json`` (``--quick``: shorter runs, written to the
gitignored ``benchmarks/.cache/qnvb_quick.json``).
Needs the ``bench`` extra (``blackjax`` for Pathfinder, ``scikit-learn`` for the split).

Problems: the ovarian data (54 x 1536, standardized), split once into 40 training and 14 test
observations (``sklearn.model_selection.train_test_split``, stratified, ``random_state=0``):

- ``logistic``: ``pl.models.LogisticRegression(X, y, prior="horseshoe")`` (the regularized horseshoe
  of the ovarian benchmark, d = 3075 unconstrained parameters);
- ``relu``: ``pl.models.ReluNet(X, y, hidden=3)``, a small Bayesian MLP (d = 4615).

Every method gets the log joint of the unconstrained vector (log-Jacobian included) from
``m = ppl_loo.as_model(model)``: ``m.logp`` per draw (its ``jax.value_and_grad``) and the batched
``m.log_density``, under ``ppl_loo.jax_settings.x64()``. All start from the same point
``mu0 = 0.1 z`` (``z ~ N(0, I)``, seed 0; ``0`` is a saddle of the ReLU net).

Methods and settings:

- **QNVB** (mean-field Gaussian, Algorithm 3, full batch, ``w = 1``, RMS Hessian as in the paper),
  with 2 Hadamard pairs per step (``qnvb``, the paper's 4 evaluations) and with 32 pairs
  (``qnvb_32``, 64 evaluations), each for 40,000 evaluations. The paper's defaults
  (``sigma_min = 1e-5``, ``sigma_max = 1e-3``, ``s_max = 1.01``, ``tau2 = 1000``) are for deep nets
  trained for many epochs: ``sigma`` would need ~1000 steps to warm up and could never exceed
  ``1e-3``. Used instead: ``sigma_min = 1e-5`` (the start; the horseshoe's irrelevant
  coefficients want sds below the ``1e-3`` one might first try), ``sigma_max = 10``,
  ``s_min = 0.9``, ``s_max = 1.1`` (``sigma`` may change 10% per step, so ``1e-5 -> 1`` takes 121
  steps), ``lam = 0.1``, ``tau1 = 10``, ``tau2 = 100``.
- **ADVI**: NumPyro ``AutoNormal`` (mean-field Gaussian, ``init_scale = 0.1``, started at ``mu0``)
  with ``Trace_ELBO`` (one draw per step, i.e. one gradient evaluation), ``optax.adam`` with
  learning rate 0.003 (of 0.003, 0.01, 0.03, 0.1 the best final ELBO on both models), 20,000 steps.
- **Pathfinder**: ``blackjax.vi.pathfinder.approximate`` (L-BFGS with history 10, its default ELBO
  selection with 200 draws per iterate), run with several ``maxiter`` budgets; its ``q`` is a
  Gaussian with a low-rank-plus-diagonal covariance (not mean-field).

Scores, computed the same way for every method: the ELBO ``mean(log p(theta) - log q(theta))`` over
4000 draws of the method's ``q`` (the same seed), and the held-out log predictive density of the
14 test observations, ``lpd = sum_i log mean_s p(y_i | theta_s)`` (pointwise, as elpd) and
``joint = log mean_s p(y_test | theta_s)``, over the same 4000 draws. QNVB and ADVI run in chunks
of steps (compiled once beforehand; only the chunks are timed), with ``(mu, sigma)`` stored after
each; Pathfinder is timed per budget (second call, after compilation). The target ELBO is the best
final ELBO among the methods minus 1 nat; "to target" is the first checkpoint at or above it.
Gradient evaluations: QNVB 2 n_pairs per step, ADVI 1 per step, Pathfinder the L-BFGS evaluations of the
log density and its gradient (counted with a host callback in a separate run) plus, listed apart,
the ``200 (iterations + 1)`` log-density-only evaluations of its ELBO selection.
Timings are on a shared 2-core machine (other jobs may run): compare them within one run only.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

import ppl_loo as pl
from ppl_loo.datasets import load_ovarian
from ppl_loo.jax_settings import x64
from ppl_loo.numerics import qnvb as Q

OUT = Path(__file__).resolve().parent / "results" / "qnvb.json"
OUT_QUICK = Path(__file__).resolve().parent / ".cache" / "qnvb_quick.json"
N_TEST = 14
ELBO_DRAWS = 4000
QNVB_CONFIG = dict(sigma_min=1e-5, sigma_max=10.0, lam=0.1, s_min=0.9, s_max=1.1, tau1=10.0, tau2=100.0)
QNVB_PAIRS = {"qnvb": 2, "qnvb_32": 32}  # 4 (the paper's) and 64 evaluations per step
ADVI_LR = 0.003
ADVI_INIT_SCALE = 0.1
FULL = {"qnvb_evals": 40000, "advi_steps": 20000, "chunks": 20, "pathfinder_maxiter": (5, 10, 20, 50, 100)}
QUICK = {"qnvb_evals": 4000, "advi_steps": 4000, "chunks": 5, "pathfinder_maxiter": (10, 30)}


# ----------------------------------------------------------------------------- problems
def split():
    from sklearn.model_selection import train_test_split

    X, y = load_ovarian()
    return train_test_split(X, y, test_size=N_TEST, stratify=y, random_state=0)


def problem(name, Xtr, Xte, ytr, yte):
    """The model's functions (training data) and the test log-likelihood ``(S, d) -> (S, n_test)``."""
    if name == "logistic":
        train, test = (pl.models.LogisticRegression(X, y, prior="horseshoe") for X, y in ((Xtr, ytr), (Xte, yte)))
    else:
        train, test = (pl.models.ReluNet(X, y, hidden=3) for X, y in ((Xtr, ytr), (Xte, yte)))
    m, mt = pl.as_model(train), pl.as_model(test)
    mu0 = 0.1 * jax.random.normal(jax.random.key(0), (m.dim,))
    return {"name": name, "dim": m.dim, "logp": m.logp, "vg": jax.jit(jax.value_and_grad(m.logp)),
            "log_density": jax.jit(m.log_density), "test_loglik": jax.jit(mt.log_lik), "mu0": mu0}


# ----------------------------------------------------------------------------- common scores
def scores(prob, draws, log_q):
    """ELBO ``mean(log p - log q)`` and the held-out log predictive densities at the draws."""
    lp = np.asarray(prob["log_density"](draws))
    ll = np.asarray(prob["test_loglik"](draws))  # (S, n_test)
    S = ll.shape[0]
    lpd = float(np.sum(_logsumexp(ll, axis=0)) - ll.shape[1] * math.log(S))
    joint = float(_logsumexp(ll.sum(axis=1), axis=0) - math.log(S))
    elbo = np.mean(lp - np.asarray(log_q))
    return {"elbo": float(elbo) if np.isfinite(elbo) else None, "test_lpd": lpd, "test_joint": joint}


def _logsumexp(a, axis):
    mx = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(mx, axis) + np.log(np.sum(np.exp(a - mx), axis=axis))


def meanfield_scores(prob, mu, sigma):
    z = jax.random.normal(jax.random.key(123), (ELBO_DRAWS, prob["dim"]))
    draws = mu + sigma * z
    log_q = jnp.sum(-0.5 * z * z - jnp.log(sigma) - 0.5 * math.log(2 * math.pi), axis=1)
    return scores(prob, draws, log_q)


# ----------------------------------------------------------------------------- chunked runs
def chunked(advance, state, params_of, n_chunks, evals_per_chunk):
    """Time ``n_chunks`` calls of the compiled ``advance``; keep the parameters after each."""
    jax.block_until_ready(advance(state))  # compile (result discarded)
    out, elapsed = [], 0.0
    for k in range(n_chunks):
        t0 = time.perf_counter()
        state = jax.block_until_ready(advance(state))
        elapsed += time.perf_counter() - t0
        out.append({"time_s": elapsed, "grad_evals": (k + 1) * evals_per_chunk, "params": params_of(state)})
    return out


def run_qnvb(prob, evals, n_chunks, n_pairs):
    config = Q.QNVBConfig(**QNVB_CONFIG, n_pairs=n_pairs)
    loss = Q.loss_from_logdensity(prob["vg"])
    per = evals // (2 * n_pairs * n_chunks)
    state = Q.init(prob["mu0"], config, jax.random.key(1))
    advance = jax.jit(lambda s: Q.run_from(s, loss, config, per)[0])
    return chunked(advance, state, lambda s: (s.mu, s.sigma), n_chunks, per * 2 * config.n_pairs)


def run_advi(prob, steps, n_chunks):
    import numpyro
    import numpyro.distributions as dist
    import optax
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.infer.initialization import init_to_value

    d, logp = prob["dim"], prob["logp"]

    def model():
        theta = numpyro.sample("theta", dist.ImproperUniform(dist.constraints.real, (), (d,)))
        numpyro.factor("log_joint", logp(theta))

    guide = AutoNormal(model, init_loc_fn=init_to_value(values={"theta": prob["mu0"]}), init_scale=ADVI_INIT_SCALE)
    svi = SVI(model, guide, numpyro.optim.optax_to_numpyro(optax.adam(ADVI_LR)), Trace_ELBO())
    state = svi.init(jax.random.key(2))
    per = steps // n_chunks
    advance = jax.jit(lambda s: jax.lax.scan(lambda c, _: (svi.update(c)[0], None), s, None, length=per)[0])

    def params_of(s):
        p = svi.get_params(s)
        return p["theta_auto_loc"], p["theta_auto_scale"]

    return chunked(advance, state, params_of, n_chunks, per)


# ----------------------------------------------------------------------------- Pathfinder
def lbfgs_evals(prob, maxiter):
    """Evaluations of ``-log p`` (with its gradient) by Pathfinder's L-BFGS, counted by a host callback."""
    from blackjax.optimizers.lbfgs import _minimize_lbfgs  # the optimizer pathfinder.approximate runs

    count = [0]

    def bump():
        count[0] += 1

    def fun(x):
        io_callback(bump, None, ordered=False)
        return -prob["logp"](x)

    (_, status), _ = _minimize_lbfgs(fun, prob["mu0"], maxiter, 10, 1e-8, 1e-5, 1000)
    return count[0], int(status.iter_num)


def run_pathfinder(prob, maxiters):
    from blackjax.vi import pathfinder

    out = []
    for maxiter in maxiters:
        fn = jax.jit(lambda key, mi=maxiter: pathfinder.approximate(key, prob["logp"], prob["mu0"], maxiter=mi)[0])
        jax.block_until_ready(fn(jax.random.key(3)))  # compile
        t0 = time.perf_counter()
        state = jax.block_until_ready(fn(jax.random.key(3)))
        elapsed = time.perf_counter() - t0
        evals, iters = lbfgs_evals(prob, maxiter)
        draws, log_q = pathfinder.sample(jax.random.key(123), state, ELBO_DRAWS)
        row = {"maxiter": maxiter, "iterations": iters, "time_s": elapsed, "grad_evals": evals,
               "logp_only_evals": 200 * (iters + 1)}
        out.append(row | scores(prob, draws, log_q))
    return out


# ----------------------------------------------------------------------------- summary
def score_checkpoints(prob, checkpoints):
    rows = []
    for c in checkpoints:
        mu, sigma = c.pop("params")
        rows.append(c | meanfield_scores(prob, mu, sigma))
    return rows


def to_target(rows, target):
    for r in rows:
        if r["elbo"] is not None and r["elbo"] >= target:
            return r
    return None


def summarize(curves):
    finals = {k: (max(v, key=lambda r: r["maxiter"]) if k == "pathfinder" else v[-1]) for k, v in curves.items()}
    best = max(r["elbo"] for r in finals.values() if r["elbo"] is not None)
    target = best - 1.0
    table = {}
    for k, rows in curves.items():
        hit = to_target(rows, target)
        f = finals[k]
        table[k] = {"final_elbo": f["elbo"], "test_lpd": f["test_lpd"], "test_joint": f["test_joint"],
                    "total_time_s": f["time_s"], "total_grad_evals": f["grad_evals"],
                    "time_to_target_s": hit and hit["time_s"], "grad_evals_to_target": hit and hit["grad_evals"]}
    return {"target_elbo": target, "methods": table}


def _fmt(value, spec):
    width = int(spec.split(".")[0].rstrip("df"))
    return "-".rjust(width) if value is None else format(value, spec)


def print_table(name, summary):
    print(f"\n{name}: target ELBO = {summary['target_elbo']:.1f} (best final - 1 nat)")
    print(f"{'method':<11} {'final ELBO':>11} {'test lpd':>9} {'test joint':>11} {'time->tgt [s]':>14} "
          f"{'grads->tgt':>11} {'total [s]':>10} {'total grads':>12}")
    for k, r in summary["methods"].items():
        print(f"{k:<11} {_fmt(r['final_elbo'], '11.1f')} {r['test_lpd']:9.2f} {r['test_joint']:11.2f} "
              f"{_fmt(r['time_to_target_s'], '14.2f')} {_fmt(r['grad_evals_to_target'], '11d')} "
              f"{r['total_time_s']:10.2f} {r['total_grad_evals']:12d}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    ap.add_argument("--models", default="logistic,relu")
    args = ap.parse_args(argv)
    mode = QUICK if args.quick else FULL
    results = {"mode": "quick" if args.quick else "full", "settings": mode, "qnvb_config": QNVB_CONFIG,
               "qnvb_pairs": QNVB_PAIRS,
               "advi": {"lr": ADVI_LR, "init_scale": ADVI_INIT_SCALE}, "elbo_draws": ELBO_DRAWS,
               "split": {"n_train": 54 - N_TEST, "n_test": N_TEST, "random_state": 0}, "models": {}}
    with x64():
        Xtr, Xte, ytr, yte = split()
        for name in args.models.split(","):
            prob = problem(name, Xtr, Xte, ytr, yte)
            t0 = time.perf_counter()
            curves = {k: score_checkpoints(prob, run_qnvb(prob, mode["qnvb_evals"], mode["chunks"], n))
                      for k, n in QNVB_PAIRS.items()}
            print(f"[{time.perf_counter() - t0:.0f} s] {name}: QNVB done", flush=True)
            curves["advi"] = score_checkpoints(prob, run_advi(prob, mode["advi_steps"], mode["chunks"]))
            print(f"[{time.perf_counter() - t0:.0f} s] {name}: ADVI done", flush=True)
            curves["pathfinder"] = run_pathfinder(prob, mode["pathfinder_maxiter"])
            print(f"[{time.perf_counter() - t0:.0f} s] {name}: Pathfinder done", flush=True)
            summary = summarize(curves)
            results["models"][name] = {"dim": prob["dim"], "summary": summary, "curves": curves,
                                       "wall_s": time.perf_counter() - t0}
            print_table(f"{name} (d = {prob['dim']})", summary)
    path = OUT_QUICK if args.quick else OUT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
