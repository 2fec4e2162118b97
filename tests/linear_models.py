"""One conjugate linear-Gaussian regression (known noise) in the three backends, for the tests of
``pl.laplace`` and ``pl.qnvb``: its posterior, its mean-field optimum and its exact LOO are closed forms.

``y ~ N(X beta, sigma^2)``, ``beta ~ N(0, tau^2 I)``; observation 3 is an outlier (a large LOO shift).
"""

import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np

import ppl_loo as pl
from tests.gaussian_models import LinearRegressionKnownNoise

STAN_LINEAR = """
data {
  int<lower=0> N;
  int<lower=1> P;
  matrix[N, P] X;
  vector[N] y;
  real<lower=0> sigma;
  real<lower=0> tau;
}
parameters {
  vector[P] beta;
}
model {
  beta ~ normal(0, tau);
  y ~ normal(X * beta, sigma);
}
generated quantities {
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = normal_lpdf(y[n] | X[n] * beta, sigma);
}
"""


def problem(n=25, p=3, sigma=0.8, tau=2.0, seed=0):
    """The closed forms (``posterior``, ``exact_elpd_i``) of the regression."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = X @ rng.normal(size=p) + sigma * rng.normal(size=n)
    y[3] += 6.0
    return LinearRegressionKnownNoise(X, y, sigma=sigma, tau=tau)


def mean_field_sd(m):
    """The mean-field KL optimum's standard deviations, ``1 / sqrt(diag(precision))``."""
    _, cov = m.posterior()
    return 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))


def jax_model(m):
    X, y = jnp.asarray(m.X), jnp.asarray(m.y)
    return pl.JaxModel({"beta": ((m.dim,), None)}, lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0.0, m.tau)),
                       lambda v: jst.norm.logpdf(y, X @ v["beta"], m.sigma), obs_dims=("obs",),
                       observed=np.asarray(m.y))


def pymc_model(m):
    import pymc as pm

    with pm.Model(coords={"obs": np.arange(m.n_obs), "coef": np.arange(m.dim)}) as model:
        beta = pm.Normal("beta", 0.0, m.tau, dims="coef")
        pm.Normal("y", pm.math.dot(m.X, beta), m.sigma, observed=m.y, dims="obs")
    return model


def stan_model(m):
    data = {"N": m.n_obs, "P": m.dim, "X": m.X, "y": m.y, "sigma": m.sigma, "tau": m.tau}
    return pl.StanModel(STAN_LINEAR, data, n_obs="N")
