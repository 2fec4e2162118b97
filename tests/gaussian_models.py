"""Conjugate Gaussian models with closed-form LOO, and exact posterior draws as DataTrees.

Used by the engine tests: the exact LOO predictive density of every observation is known, so the
adapted elpd_i can be checked against the truth, not against another estimator.
"""

import functools
import warnings

import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy import stats

from ppl_loo.adapters.jax.base import PosteriorModel


class LinearRegressionKnownNoise(PosteriorModel):
    """y ~ N(X beta, sigma^2), beta ~ N(0, tau^2 I); theta = beta (unconstrained already)."""

    var_name = "y"
    obs_dims = ("obs",)

    def __init__(self, X, y, sigma=1.0, tau=10.0):
        self.X = np.asarray(X, float)
        self.y = np.asarray(y, float)
        self.sigma, self.tau = float(sigma), float(tau)
        self.n_obs, self.dim = self.X.shape
        self.obs_shape = (self.n_obs,)

    def loglik(self, theta):
        mu = jnp.asarray(self.X) @ theta
        return -0.5 * ((jnp.asarray(self.y) - mu) / self.sigma) ** 2 - jnp.log(self.sigma) - 0.5 * jnp.log(2 * jnp.pi)

    def logp(self, theta):
        return jnp.sum(self.loglik(theta)) - 0.5 * jnp.sum((theta / self.tau) ** 2)

    def unconstrain(self, posterior):
        b = np.asarray(posterior["beta"].transpose("chain", "draw", ...).values)
        return b.reshape(-1, self.dim)

    def constrain(self, theta):
        return {"beta": np.asarray(theta)}

    # ---- closed forms
    def posterior(self, drop=None):
        keep = np.ones(self.n_obs, bool)
        if drop is not None:
            keep[drop] = False
        X, y = self.X[keep], self.y[keep]
        P = X.T @ X / self.sigma**2 + np.eye(self.dim) / self.tau**2
        cov = np.linalg.inv(P)
        mean = cov @ X.T @ y / self.sigma**2
        return mean, cov

    def exact_elpd_i(self):
        out = np.empty(self.n_obs)
        for i in range(self.n_obs):
            m, C = self.posterior(drop=i)
            x = self.X[i]
            out[i] = stats.norm.logpdf(self.y[i], x @ m, np.sqrt(self.sigma**2 + x @ C @ x))
        return out

    def exact_draws(self, n_chains=4, n_draws=1000, seed=0):
        rng = np.random.default_rng(seed)
        m, C = self.posterior()
        b = rng.multivariate_normal(m, C, size=(n_chains, n_draws))
        ll = stats.norm.logpdf(self.y, b @ self.X.T, self.sigma)  # NumPy: float64 whatever JAX's setting
        return xr.DataTree.from_dict({
            "posterior": xr.Dataset({"beta": (("chain", "draw", "coef"), b)}),
            "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)}),
            "observed_data": xr.Dataset({"y": (("obs",), self.y)}),
        })


def normal_mean_model(y, sigma=1.0, tau=10.0):
    """Normal mean with known variance and a N(0, tau^2) prior: the 1-d special case."""
    y = np.asarray(y, float)
    return LinearRegressionKnownNoise(np.ones((len(y), 1)), y, sigma=sigma, tau=tau)


def leverage_regression(seed=1, n=40):
    """Linear regression with two high-leverage gross outliers (the hard case for plain PSIS: deleting either one
    moves the posterior far from the full-data posterior)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    x[0] = [6.0, 5.0]
    x[1] = [-5.0, 6.0]
    X = np.column_stack([np.ones(n), x])
    beta = np.array([0.5, 1.0, -1.0])
    y = X @ beta + rng.normal(size=n)
    y[0] = X[0] @ beta - 12.0
    y[1] = X[1] @ beta + 12.0
    return LinearRegressionKnownNoise(X, y, sigma=1.0, tau=10.0)


@functools.lru_cache(maxsize=1)
def leverage_fit():
    """``(model, data, res)``: :func:`leverage_regression` (seed 1, n 40), exact posterior draws 4 x 1000 (seed 11)
    and ``pl.loo`` with its defaults; computed once per test process (several test files use it; do not modify)."""
    import ppl_loo as pl

    model = leverage_regression(seed=1, n=40)
    data = model.exact_draws(n_chains=4, n_draws=1000, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, data, pl.loo(data, model, progressbar=False)


def leverage_problem(n=40, p=15, seed=5):
    """Linear regression, p = 15, with two high-leverage outliers (design rows 6 and 5 times the scale, 8 and 6
    noise sd off the line): plain PSIS and the search alone fail there (the second opinions' test problem,
    ``tests/test_mixture.py`` and ``benchmarks/second_opinions.py``)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = rng.normal(size=p)
    y = X @ beta + rng.normal(size=n)
    X[0] *= 6.0
    X[1] *= 5.0
    y[0] = X[0] @ beta + 8.0
    y[1] = X[1] @ beta - 6.0
    return LinearRegressionKnownNoise(X, y, sigma=1.0, tau=2.0)
