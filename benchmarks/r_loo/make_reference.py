"""Reference numbers from R's ``loo`` 2.10.1 for ``tests/test_r_loo_reference.py``.

R's side is ``reference.R`` beside this file; install R ``loo`` 2.10.1 (and ``posterior`` 1.7.1) with
``install_r_loo.sh`` (Debian's ``r-cran-loo`` is 2.5.1). Five cases, each a log-likelihood ``(S, n)`` of posterior
draws (chain-major rows):

- ``example``: R's ``example_loglik_array()`` (2 chains x 500 draws, 32 observations);
- ``normal_outlier``: a normal mean with known sigma 1, 12 ordinary observations and one outlier (4 x 500 draws of
  ``mu`` from ``ppl_loo.sampling.sample_nuts``); ``loo_compare`` against the same draws under sigma 1.5;
- ``few_draws``: its first 50 draws per chain (4 x 50); ``loo_crps`` / ``loo_scrps`` with two sets of ``y_rep``;
- ``leverage``: a linear regression with known noise, one high-leverage outlier (exact conjugate posterior draws,
  4 x 250, 20 observations);
- ``logistic``: a logistic regression (``sample_nuts``, 4 x 250, 30 observations).

R computes, with ``r_eff = relative_eff(exp(log_lik), chain_id)`` (its recommended workflow): ``loo`` (pointwise
elpd, p_loo, looic, MCSE, influence k, n_eff, the estimates and SEs, ``pareto_k_table``, the normalized weights of
``psis``), ``loo`` with ``r_eff = 1``, ``waic``, and where there is a prediction ``E_loo`` (mean, variance, sd,
quantiles, each with its k-hat) and ``loo_predictive_metric``. The inputs go to ``tests/data/r_loo/input.npz`` (the
draws, from which the test rebuilds the log-likelihood), R's numbers to ``tests/data/r_loo/reference.npz`` and the
versions to ``reference.json``; the test needs no R.

    benchmarks/r_loo/install_r_loo.sh       # once; R_LIBS=/work/rlib
    R_LIBS=/work/rlib .venv/bin/python benchmarks/r_loo/make_reference.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE.parent]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "r_loo"
#: 12 well-behaved observations and one outlier (its plain-PSIS k-hat is above 0.7)
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5, 4.5])
PROBS = (0.05, 0.5, 0.9)
CASES = ("example", "normal_outlier", "few_draws", "leverage", "logistic")


def normal_ll(mu, y, sigma=1.0):
    """``log N(y_i | mu_s, sigma)`` ``(S, n)`` of the draws ``mu`` ``(S,)``."""
    return -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * ((y[None, :] - mu[:, None]) / sigma) ** 2


def leverage_data():
    """``(X, y)`` of the regression case: 19 points on [-1, 1] and one at x = 6 far below the line."""
    rng = np.random.default_rng(7)
    x = np.r_[np.linspace(-1, 1, 19), 6.0]
    y = 0.5 + 1.0 * x + rng.normal(size=x.size)
    y[-1] = 0.5 + 1.0 * 6.0 - 6.0
    return np.column_stack([np.ones_like(x), x]), y


def logistic_data():
    """``(X, y)`` of the logistic case (30 observations)."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=30)
    y = (rng.uniform(size=30) < 1 / (1 + np.exp(-(0.3 + 1.5 * x)))).astype(float)
    y[np.argmax(x)] = 0.0  # the largest x misclassified: a high k-hat
    return np.column_stack([np.ones_like(x), x]), y


def regression_ll(beta, X, y):
    """``log N(y_i | x_i beta_s, 1)`` ``(S, n)``."""
    return -0.5 * np.log(2 * np.pi) - 0.5 * (y[None, :] - beta @ X.T) ** 2


def logistic_ll(beta, X, y):
    """``log Bernoulli(y_i | logit^-1(x_i beta_s))`` ``(S, n)``."""
    eta = beta @ X.T
    return y * -np.logaddexp(0, -eta) + (1 - y) * -np.logaddexp(0, eta)


def cases(mu, beta_lev, beta_log, example_ll):
    """``{case: dict(ll, chains, pred, y, ...)}`` of the stored draws."""
    S = mu.size
    X, y = leverage_data()
    Xl, yl = logistic_data()
    few = mu[:, :50].reshape(-1)
    rng = np.random.default_rng(5)
    return {
        "example": dict(ll=example_ll, chains=2),
        "normal_outlier": dict(ll=normal_ll(mu.reshape(-1), Y), chains=4, pred=np.repeat(mu.reshape(-1, 1), Y.size, 1),
                               y=Y, metrics=["mae", "rmse", "mse"], ll2=normal_ll(mu.reshape(-1), Y, 1.5)),
        "few_draws": dict(ll=normal_ll(few, Y), chains=4, pred=np.repeat(few[:, None], Y.size, 1), y=Y,
                          metrics=["mae", "rmse", "mse"], yrep=few[:, None] + rng.normal(size=(few.size, Y.size)),
                          yrep2=few[:, None] + rng.normal(size=(few.size, Y.size))),
        "leverage": dict(ll=regression_ll(beta_lev.reshape(-1, 2), X, y), chains=4, pred=beta_lev.reshape(-1, 2) @ X.T,
                         y=y, metrics=["mae", "rmse", "mse"]),
        "logistic": dict(ll=logistic_ll(beta_log.reshape(-1, 2), Xl, yl), chains=4,
                         pred=1 / (1 + np.exp(-(beta_log.reshape(-1, 2) @ Xl.T))), y=yl,
                         metrics=["mae", "rmse", "mse", "acc", "balanced_acc"]),
    } if S else {}


def draws():
    """The stored draws: ``mu`` (4, 500) of the normal mean (kept from an existing input), the regression's exact
    posterior ``beta`` (4, 250, 2) and the logistic regression's NUTS draws (4, 250, 2)."""
    import jax.numpy as jnp
    import jax.scipy.stats as jst

    import ppl_loo as pl
    from ppl_loo.sampling import sample_nuts

    old = OUT / "input.npz"
    if old.exists():
        mu = np.load(old)["mu"]
    else:
        model = pl.JaxModel({"mu": ((), None)}, lambda v: jst.norm.logpdf(v["mu"], 0.0, 10.0),
                            lambda v: jst.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
        data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
        mu = np.asarray(data["posterior"]["mu"].values, dtype=float)
    X, y = leverage_data()  # conjugate: prior N(0, 10^2 I), noise sd 1
    prec = X.T @ X + np.eye(2) / 100
    cov = np.linalg.inv(prec)
    beta_lev = np.random.default_rng(13).multivariate_normal(cov @ X.T @ y, cov, size=(4, 250))
    Xl, yl = logistic_data()
    model = pl.JaxModel({"beta": ((2,), None)}, lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0.0, 2.5)),
                        lambda v: yl * jax_log_sigmoid(Xl @ v["beta"]) + (1 - yl) * jax_log_sigmoid(-(Xl @ v["beta"])),
                        obs_dims=("obs",), observed=yl)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=250, random_seed=17)
    beta_log = np.asarray(data["posterior"]["beta"].values, dtype=float)
    return mu, beta_lev, beta_log


def jax_log_sigmoid(x):
    import jax

    return jax.nn.log_sigmoid(x)


def example_loglik(tmp):
    """R's ``example_loglik_array()`` as ``(S, n)`` chain-major rows."""
    path = Path(tmp) / "example.bin"
    subprocess.run(["Rscript", "-e", "x <- loo::example_loglik_array(); x <- aperm(x, c(2, 1, 3)); "
                    f"writeBin(as.double(aperm(x, c(3, 2, 1))), '{path}', size = 8, endian = 'little')"],
                   check=True, capture_output=True)
    arr = np.fromfile(path, dtype="<f8")  # (chain, iter, obs) in C order
    return arr.reshape(2, 500, 32).reshape(1000, 32)


def write_case(d, c, seed):
    d.mkdir(parents=True, exist_ok=True)
    S, n = c["ll"].shape
    meta = {"S": S, "n": n, "chains": c["chains"], "has_pred": "pred" in c, "has_yrep": "yrep" in c,
            "probs": list(PROBS), "metrics": c.get("metrics", []), "seed": seed}
    if "ll2" in c:
        meta["compare_with"] = "log_lik2"
    (d / "meta.json").write_text(json.dumps(meta))
    for key, name in (("ll", "log_lik"), ("pred", "pred"), ("y", "y"), ("yrep", "yrep"), ("yrep2", "yrep2"),
                      ("ll2", "log_lik2")):
        if key in c:
            np.ascontiguousarray(c[key], dtype="<f8").tofile(d / f"{name}.bin")


def read_case(d):
    names = json.loads((d / "r_out.json").read_text())
    values = np.fromfile(d / "r_out.bin", dtype="<f8")
    out, pos = {}, 0
    for name, size in names.items():
        out[name] = values[pos:pos + size]
        pos += size
    assert pos == values.size
    return out


def main():
    mu, beta_lev, beta_log = draws()
    with tempfile.TemporaryDirectory() as tmp:
        example = example_loglik(tmp)
        all_cases = cases(mu, beta_lev, beta_log, example)
        for i, (name, c) in enumerate(all_cases.items()):
            write_case(Path(tmp) / name, c, seed=100 + i)
        proc = subprocess.run(["Rscript", str(HERE / "reference.R"), tmp, *all_cases], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        ref = {}
        for name, c in all_cases.items():
            for key, value in read_case(Path(tmp) / name).items():
                if key == "log_weights":  # R's (n, S) matrix, written column by column
                    value = value.reshape(c["ll"].shape).T
                if key == "E_quantile":  # R's (len(PROBS), n) matrix, written column by column: (n, len(PROBS))
                    value = value.reshape(-1, len(PROBS))
                ref[f"{name}/{key}"] = value
    few = all_cases["few_draws"]
    (X, y), (Xl, yl) = leverage_data(), logistic_data()
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "input.npz", mu=mu, y=Y, probs=np.asarray(PROBS), beta_leverage=beta_lev,
                        beta_logistic=beta_log, example_log_lik=example, yrep=few["yrep"], yrep2=few["yrep2"],
                        X_leverage=X, y_leverage=y, X_logistic=Xl, y_logistic=yl)
    np.savez_compressed(OUT / "reference.npz", **ref)
    versions = json.loads(proc.stdout)
    (OUT / "reference.json").write_text(json.dumps(versions, indent=1) + "\n")
    print(f"wrote {OUT} (R {versions['r_version']}, loo {versions['loo_version']}, posterior "
          f"{versions['posterior_version']})")


if __name__ == "__main__":
    main()
